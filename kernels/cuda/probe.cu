// Whether this binary holds code the current GPU can run (sm_90 machine code, or
// compute_90 PTX the driver can compile for a newer GPU).
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {
__global__ void probe() {}
}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, probe);
}

}  // namespace troupe::kernels::cuda::launch
