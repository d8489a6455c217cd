// The GPU devices this process can make, for code that must not link a CUDA library
// itself (the engine makes each rank's device from the config, engine/rank_device.h).
//
// A binary linked with a CUDA device library installs its backend once at start
// (kernels/cuda/cuda_backend.h: the supervisor built with CUDA; the emulated runtime
// test installs the CPU emulation of CUDA the same way). A CPU-only build installs
// none, and asking for a GPU then fails with an error that says so.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.h"

namespace troupe::comm {
class Communicator;
}

namespace troupe::kernels {

// Communicators over device memory (NCCL: comm::nccl_groups()), for code that must not
// link NCCL itself.
struct DeviceGroups {
  // One process, several GPUs: member r of one group on devices[r], devices from
  // GpuBackend::make on distinct GPUs.
  using MakeGroup = std::function<std::vector<std::shared_ptr<comm::Communicator>>(
      const std::vector<std::shared_ptr<Device>>& devices, const std::string& name, std::chrono::milliseconds timeout)>;
  MakeGroup make;
  // Across processes (cluster mode): the supervisor mints one ID per group and
  // generation (`new_id`, text; needs no GPU) and hands it out; each member joins with
  // it on its own device (`join`: member `rank` of `size`). `join` waits until every
  // member has joined, up to `timeout`.
  std::function<std::string()> new_id;
  using JoinGroup = std::function<std::shared_ptr<comm::Communicator>(
      const std::string& id, int rank, int size, const std::shared_ptr<Device>& device, const std::string& name,
      std::chrono::milliseconds timeout)>;
  JoinGroup join;
  // Pipeline neighbours across processes: member 0 is stage p, member 1 stage p+1, with
  // a communicator per direction (IDs `forward` and `backward`; comm/nccl says why).
  using JoinPipelinePair = std::function<std::shared_ptr<comm::Communicator>(
      const std::string& forward, const std::string& backward, int rank, const std::shared_ptr<Device>& device,
      const std::string& name, std::chrono::milliseconds timeout)>;
  JoinPipelinePair join_pipeline_pair;
};

struct GpuBackend {
  // GPUs this process can use now; 0 with the reason in *why.
  std::function<int(std::string* why)> count;
  // A new device (its own streams and scratch) on GPU `ordinal` in [0, count).
  std::function<std::shared_ptr<Device>(int ordinal)> make;
  // Left empty, the engine stages every collective through the host
  // (engine/stage_worker.h), and cluster mode cannot run on GPUs.
  DeviceGroups groups;
};

// Replaces the process's backend (thread-safe; normally called once, before any rank
// device is made). A backend without a count function removes it (tests).
void install_gpu_backend(GpuBackend backend);
// The installed backend, or null.
std::shared_ptr<const GpuBackend> gpu_backend();

}  // namespace troupe::kernels
