// SwiGLU's activation (Llama's MLP), elementwise: out = silu(gate) * up with
// silu(g) = g / (1 + exp(-g)), and its backward. Grid-stride loops; each element is
// computed by one thread the same way wherever it sits.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

__global__ void swiglu_fwd(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// dgate = dout * up * (sigmoid + silu (1 - sigmoid)), dup = dout * silu; both inputs of
// an element are read before either output is written (dgate may alias gate, dup up).
__global__ void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float den = 1.0f + expf(-g);
    const float sig = 1.0f / den, silu = g / den;
    dgate[i] = d * u * (sig + silu * (1.0f - sig));
    dup[i] = d * silu;
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  swiglu_fwd<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(out, gate, up, n);
  TROUPE_CUDA_LAUNCHED();
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n,
                     cudaStream_t s) {
  if (n <= 0) return;
  swiglu_bwd<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(dgate, dup, dout, gate, up, n);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
