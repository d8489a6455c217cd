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

struct GpuBackend {
  // GPUs this process can use now; 0 with the reason in *why.
  std::function<int(std::string* why)> count;
  // A new device (its own streams and scratch) on GPU `ordinal` in [0, count).
  std::function<std::shared_ptr<Device>(int ordinal)> make;
  // Communicators over device memory (NCCL, comm/nccl: comm::nccl_group_maker) for one
  // group: member r on devices[r], devices from `make` on distinct GPUs. Left empty, the
  // engine stages every collective through the host (engine/stage_worker.h).
  using MakeGroup = std::function<std::vector<std::shared_ptr<comm::Communicator>>(
      const std::vector<std::shared_ptr<Device>>& devices, const std::string& name, std::chrono::milliseconds timeout)>;
  MakeGroup make_group;
};

// Replaces the process's backend (thread-safe; normally called once, before any rank
// device is made). A backend without a count function removes it (tests).
void install_gpu_backend(GpuBackend backend);
// The installed backend, or null.
std::shared_ptr<const GpuBackend> gpu_backend();

}  // namespace troupe::kernels
