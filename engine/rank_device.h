// The compute device of one (dp, pp, tp) rank, shared by the rank's stage and its
// optimizer shard.
//
// Why one device for both: a stage and its shard never compute at the same time (the
// stage hands its gradients over and runs no op until ShardApplied), so one device
// serves both: on the CPU one thread pool, so the shard's AdamW and norm run on the
// threads threads_per_stage budgeted for the rank instead of a second pool whose
// spinning workers preempt the stage's; on a GPU the gradients and parameters the
// shard updates live on the stage's device anyway. The CPU pool refuses two callers
// at once (kernels::cpu::ThreadPool), so a broken invariant fails loudly.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "engine/topology.h"
#include "kernels/device.h"
#include "messages/config.pb.h"

namespace troupe::engine {

// Throws std::invalid_argument naming device.type when the actor runtime cannot run
// on the configured device: CUDA without an installed GPU backend (kernels/gpu_backend.h)
// or without a GPU, with tensor parallelism but not a GPU per rank and NCCL, or in
// cluster mode without NCCL. A cluster run's supervisor needs no GPU (its workers'
// devices are checked as they make them).
void check_runtime_device(const Config& c);

// Compute threads for each stage device: the configured threads (0: the machine's
// cores) divided among the stage ranks that run at once (those of the physical layout
// of `placed`), at least 1.
int threads_per_stage(const Config& c, const Topology& placed);

// A new device for rank r of `placed`: a CPU device with threads_per_stage threads, or a
// CUDA device on GPU (flat rank index mod GPU count) from the installed GPU backend.
std::shared_ptr<kernels::Device> make_rank_device(const Config& c, const Topology& placed, const Rank& r);

// The communicators (and maybe devices) of one start of a training group. On GPUs, when
// every rank has a GPU of its own and the GPU backend makes device communicators
// (kernels::DeviceGroups::make: NCCL), the ranks' devices are made here (one per
// rank, on GPU Topology::index) and each data-parallel, tensor-parallel and
// tied-embedding group is a device communicator over them: the stages then run those
// collectives on device memory (engine/stage_worker.h; the tensor-parallel ones inside
// the model). Otherwise the in-process communicators
// (make_inprocess_comms) and no devices (RankDevices makes them as the actors start).
// `placed`: the group's layout on its placement (engine::RunState::topology).
CommPlan make_group_comms(const Config& c, const Topology& placed, std::chrono::milliseconds timeout);

// A training group's rank devices, handed out per start of the group: the stage and
// the optimizer shard of one rank that start together (the same incarnation) get the
// same device; a later start gets a new one, so an old actor still finishing an op
// never shares a device with its successor. On a cluster worker with GPUs, the ranks it
// hosts take its GPUs in arrival order, one each (more ranks than GPUs: refused, naming
// device.type). Thread-safe.
class RankDevices {
 public:
  RankDevices(std::shared_ptr<const Config> c, const Topology& placed) : config_(std::move(c)), placed_(placed) {}
  std::shared_ptr<kernels::Device> get(const Rank& r, int incarnation);
  const Topology& placed() const { return placed_; }

 private:
  struct Entry {
    int incarnation = -1;
    std::weak_ptr<kernels::Device> device;
  };
  std::mutex mu_;
  std::shared_ptr<const Config> config_;
  const Topology placed_;
  std::map<std::tuple<int32_t, int32_t, int32_t>, Entry> devices_;
  std::map<std::tuple<int32_t, int32_t, int32_t>, int> gpu_of_;  // cluster mode on GPUs: each rank's GPU
};

}  // namespace troupe::engine
