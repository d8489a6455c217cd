#include "kernels/gpu_backend.h"

#include <mutex>

namespace troupe::kernels {
namespace {

std::mutex mu;
std::shared_ptr<const GpuBackend> installed;

}  // namespace

void install_gpu_backend(GpuBackend backend) {
  std::shared_ptr<const GpuBackend> b;
  if (backend.count) b = std::make_shared<const GpuBackend>(std::move(backend));
  std::lock_guard lock(mu);
  installed = std::move(b);
}

std::shared_ptr<const GpuBackend> gpu_backend() {
  std::lock_guard lock(mu);
  return installed;
}

}  // namespace troupe::kernels
