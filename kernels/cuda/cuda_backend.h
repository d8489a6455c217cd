// Installs the CUDA device as this process's GPU backend (kernels/gpu_backend.h), so
// that the engine can put ranks on GPUs (device.type: CUDA).
#pragma once

#include "kernels/cuda/cuda_device.h"
#include "kernels/gpu_backend.h"

namespace troupe::kernels::cuda {

// Every device made gets `defaults` with its `device` ordinal replaced. `groups`: NCCL
// communicators over the devices (comm::nccl_groups()), or none.
void install_cuda_backend(CudaDeviceOptions defaults = {}, DeviceGroups groups = {});

}  // namespace troupe::kernels::cuda
