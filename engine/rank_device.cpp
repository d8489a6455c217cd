#include "engine/rank_device.h"

#include <stdexcept>

#include "engine/stage_worker.h"
#include "kernels/cpu/cpu_device.h"

namespace troupe::engine {

void check_runtime_device(const Config& c) {
  if (c.device().type() != DeviceConfig::CPU)
    throw std::invalid_argument(
        "device.type: the actor runtime runs its stages and optimizer shards on the CPU device; the CUDA device "
        "is so far used by test_cuda and gpu_bench only (docs/gpu.md, \"Hooks the runtime needs\")");
}

std::shared_ptr<kernels::Device> make_rank_device(const Config& c, const Rank&) {
  check_runtime_device(c);
  return std::make_shared<kernels::cpu::CpuDevice>(threads_per_stage(c));
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
