#include "engine/rank_device.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "comm/gloo_groups.h"
#include "engine/hosted_stage.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/gpu_backend.h"

namespace troupe::engine {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw std::invalid_argument("device.type: CUDA: " + why); }

struct UsableGpus {
  std::shared_ptr<const kernels::GpuBackend> backend;
  int count = 0;
};

// Whether each rank gets a GPU of its own and the backend makes device communicators
// (NCCL) over them: make_group_comms then puts the groups on device memory.
bool device_groups(const UsableGpus& gpus, const Config& c) {
  return gpus.backend->groups.make && gpus.count >= Topology::logical(c).ranks();
}

// The GPUs a CUDA config runs on; throws naming device.type when it cannot run there.
// `count`: whether this process runs ranks (false: a cluster run's supervisor, which
// only mints the NCCL group IDs and needs no GPU).
UsableGpus usable_gpus(const Config& c, bool count = true) {
  UsableGpus gpus{kernels::gpu_backend()};
  if (!gpus.backend)
    refuse("this supervisor was built without CUDA (cmake found no CUDA toolkit, or -DTROUPE_CUDA=OFF)");
  // Across processes every group is an NCCL group (engine/cluster_device_groups.h).
  const bool cluster = c.cluster().workers() > 0;
  const auto& g = gpus.backend->groups;
  if (cluster && !(g.new_id && g.join && g.join_pipeline_pair))
    refuse("cluster mode on GPUs needs NCCL, which this build has not");
  // The in-process communicators read and write host memory. The stages stage the
  // data-parallel and tied-embedding collectives through the host (StageWorker), but
  // the tensor-parallel ones run inside the model's forward and backward on device
  // memory: they need NCCL groups, so a GPU per rank.
  const bool tp = c.parallel().tensor() > 1;
  const int ranks = Topology::logical(c).ranks();
  if (tp && !g.make) refuse("parallel.tensor > 1 needs NCCL, which this build has not");
  if (!count) return gpus;
  std::string why;
  gpus.count = gpus.backend->count(&why);
  if (gpus.count <= 0) refuse("no GPU: " + why);
  if (tp && !cluster && !device_groups(gpus, c))
    refuse("parallel.tensor > 1 needs a GPU per rank (NCCL groups): " + std::to_string(ranks) + " ranks, " +
           std::to_string(gpus.count) + " GPUs");
  return gpus;
}

}  // namespace

void check_runtime_device(const Config& c) {
  if (c.device().type() != DeviceConfig::CPU) usable_gpus(c, /*count=*/c.cluster().workers() == 0);
}

int threads_per_stage(const Config& c, const Topology& placed) {
  int total = c.device().threads();
  if (total <= 0) total = int(std::max(1u, std::thread::hardware_concurrency()));
  // Hosted logical replicas take turns on their physical replica's device (Topology).
  const int stages = placed.physical_layout().ranks();
  return std::max(1, total / stages);
}

std::shared_ptr<kernels::Device> make_rank_device(const Config& c, const Topology& placed, const Rank& r) {
  if (c.device().type() == DeviceConfig::CPU)
    return std::make_shared<kernels::cpu::CpuDevice>(threads_per_stage(c, placed));
  // Ranks in (dp, pp, tp) order round-robin over the GPUs: with fewer GPUs than ranks
  // several ranks share one, each with a device (streams, scratch) of its own.
  const auto gpus = usable_gpus(c);
  return gpus.backend->make(placed.index(r) % gpus.count);
}

CommPlan make_group_comms(const Config& c, const Topology& topo, std::chrono::milliseconds timeout) {
  if (topo.hosts_several()) return make_hosting_comms(c, topo, timeout);  // the CPU only (config/validate.cpp)
  CommPlan plan = make_inprocess_comms(topo, timeout);
  if (c.device().type() == DeviceConfig::CPU) return plan;
  const auto gpus = usable_gpus(c);
  if (!device_groups(gpus, c)) return plan;
  for (const auto& r : topo.all_ranks()) plan.devices.push_back(gpus.backend->make(topo.index(r)));
  // Each group a device communicator over its members' devices, replacing the
  // in-process group of the same name (left unused). Pipeline neighbours hand each
  // other pointers in one process; tensor-parallel groups of one member are never
  // called; data-parallel ones are made even of one member: a stage's collectives are
  // all on device memory or none.
  for (const auto& g : comm::layout_groups(topo.dp, topo.pp, topo.tp)) {
    if (g.kind == comm::GroupKind::kPipelineNeighbours || (g.kind == comm::GroupKind::kTensorParallel && topo.tp == 1))
      continue;
    std::vector<std::shared_ptr<kernels::Device>> devices;
    for (const int m : g.members) devices.push_back(plan.devices[size_t(m)]);
    const auto made = gpus.backend->groups.make(devices, g.name, timeout);
    plan.all_members.insert(plan.all_members.end(), made.begin(), made.end());
    for (size_t i = 0; i < g.members.size(); ++i) slot_of(plan.ranks[size_t(g.members[i])], g, int(i)) = made[i];
  }
  return plan;
}

std::shared_ptr<kernels::Device> RankDevices::get(const Rank& r, int incarnation) {
  std::lock_guard lock(mu_);
  // Logical ranks hosted by one physical rank share its device (engine/hosted_stage.h).
  const Rank host = placed_.host_of(r);
  const std::tuple key{host.dp, host.pp, host.tp};
  auto& e = devices_[key];
  if (e.incarnation == incarnation)
    if (auto d = e.device.lock()) return d;
  std::shared_ptr<kernels::Device> d;
  if (config_->device().type() != DeviceConfig::CPU && config_->cluster().workers() > 0) {
    // A worker's ranks take its GPUs in the order they arrive, one each for good: every
    // group is an NCCL group, which takes one member per GPU, and ranks placed together
    // are in the same groups (e.g. BY_STAGE: one stage of every replica, a DP group),
    // where the flat index mod GPUs could give two of them one GPU.
    const auto gpu = gpu_of_.try_emplace(key, int(gpu_of_.size())).first->second;
    const auto gpus = usable_gpus(*config_);
    if (gpu >= gpus.count)
      refuse(fmt::format("cluster mode needs a GPU per rank on each worker: this worker hosts {} ranks and sees {} "
                         "GPU(s)",
                         gpu_of_.size(), gpus.count));
    d = gpus.backend->make(gpu);
  } else {
    d = make_rank_device(*config_, placed_, host);
  }
  e = {incarnation, d};
  return d;
}

}  // namespace troupe::engine
