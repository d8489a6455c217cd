#include "engine/rank_device.h"

#include <stdexcept>
#include <string>

#include "engine/stage_worker.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/gpu_backend.h"

namespace troupe::engine {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw std::invalid_argument("device.type: CUDA: " + why); }

struct UsableGpus {
  std::shared_ptr<const kernels::GpuBackend> backend;
  int count = 0;
};

// The GPUs a CUDA config runs on; throws naming device.type when it cannot run there.
UsableGpus usable_gpus(const Config& c) {
  // The in-process communicators read and write host memory. The stages stage the
  // data-parallel and tied-embedding collectives through the host (StageWorker), but
  // the tensor-parallel ones run inside the model's forward and backward, and the
  // pipeline's cross-process sends read the activations directly: both need NCCL
  // communicators on the ranks' GPUs first (docs/gpu.md).
  if (c.parallel().tensor() > 1) refuse("parallel.tensor > 1 is not supported on GPUs yet (it needs NCCL groups)");
  if (c.cluster().workers() > 0) refuse("cluster mode is not supported on GPUs yet (it needs NCCL groups)");
  UsableGpus gpus{kernels::gpu_backend()};
  if (!gpus.backend)
    refuse("this supervisor was built without CUDA (cmake found no CUDA toolkit, or -DTROUPE_CUDA=OFF)");
  std::string why;
  gpus.count = gpus.backend->count(&why);
  if (gpus.count <= 0) refuse("no GPU: " + why);
  return gpus;
}

}  // namespace

void check_runtime_device(const Config& c) {
  if (c.device().type() != DeviceConfig::CPU) usable_gpus(c);
}

std::shared_ptr<kernels::Device> make_rank_device(const Config& c, const Rank& r) {
  if (c.device().type() == DeviceConfig::CPU)
    return std::make_shared<kernels::cpu::CpuDevice>(threads_per_stage(c));
  // Ranks in (dp, pp, tp) order round-robin over the GPUs: with fewer GPUs than ranks
  // several ranks share one, each with a device (streams, scratch) of its own.
  const auto gpus = usable_gpus(c);
  const auto& p = c.parallel();
  const int flat = (r.dp * p.pipeline() + r.pp) * p.tensor() + r.tp;
  return gpus.backend->make(flat % gpus.count);
}

std::shared_ptr<kernels::Device> RankDevices::get(const Rank& r, int incarnation) {
  std::lock_guard lock(mu_);
  auto& e = devices_[{r.dp, r.pp, r.tp}];
  if (e.incarnation == incarnation)
    if (auto d = e.device.lock()) return d;
  auto d = make_rank_device(config_, r);
  e = {incarnation, d};
  return d;
}

}  // namespace troupe::engine
