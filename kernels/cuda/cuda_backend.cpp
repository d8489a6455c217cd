#include "kernels/cuda/cuda_backend.h"

#include "kernels/gpu_backend.h"

namespace troupe::kernels::cuda {

void install_cuda_backend(CudaDeviceOptions defaults, DeviceGroups groups) {
  GpuBackend b;
  b.count = [](std::string* why) { return gpu_available(why) ? device_count() : 0; };
  b.make = [defaults](int ordinal) -> std::shared_ptr<Device> {
    auto o = defaults;
    o.device = ordinal;
    return std::make_shared<CudaDevice>(o);
  };
  b.groups = std::move(groups);
  install_gpu_backend(std::move(b));
}

}  // namespace troupe::kernels::cuda
