// emulated_worker: `supervisor worker` on the CPU emulation of CUDA and NCCL
// (test/cuda/emulation), for test_cluster_cuda_emulated's cluster runs with
// device.type CUDA on a machine without a GPU. Takes the arguments `supervisor` does:
// `emulated_worker worker --connect ...`. Emulated NCCL members in different processes
// meet through files (test/cuda/emulation/include/nccl.h).
#include <cstdio>
#include <cstring>
#include <exception>

#include "comm/nccl/nccl_communicator.h"
#include "kernels/cuda/cuda_backend.h"

namespace troupe::cli {
int worker_main(int argc, char** argv);  // apps/supervisor/cmd_worker.cpp
}

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "worker") != 0) {
    std::fprintf(stderr, "usage: emulated_worker worker [supervisor worker's options]\n");
    return 2;
  }
  troupe::kernels::cuda::install_cuda_backend({}, troupe::comm::nccl_groups());
  try {
    return troupe::cli::worker_main(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "emulated_worker: error: %s\n", e.what());
    return 1;
  }
}
