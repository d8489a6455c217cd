// Elementwise kernels: GELU forward/backward, add, scale, hidden dropout, and the bias +
// residual prologue of linear_forward. Grid-stride loops; each element is computed by one
// thread the same way wherever it sits, so results do not depend on the launch shape.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dropout.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

#define TROUPE_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void gelu_fwd(float* out, const float* inp, int64_t n) {
  TROUPE_GRID_STRIDE(i, n) out[i] = gelu(inp[i]);
}
__global__ void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  TROUPE_GRID_STRIDE(i, n) dinp[i] = dout[i] * gelu_grad(inp[i]);
}
__global__ void add_k(float* out, const float* a, const float* b, int64_t n) {
  TROUPE_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void scale_k(float* x, int64_t n, float f) {
  TROUPE_GRID_STRIDE(i, n) x[i] *= f;
}
// Element (r, c) of [rows, cols]: row g = first_row + r of the microbatch's tokens.
__global__ void dropout_k(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols,
                          int T, DropoutMask drop) {
  TROUPE_GRID_STRIDE(i, rows * cols) {
    const int64_t g = first_row + i / cols;
    const int c = int(i % cols);
    const float kept = dropout_keep(drop, drop.key, drop.first_slot + g / T, int(g % T), drop.first_col + c)
                           ? in[i] * drop.scale
                           : 0.0f;
    out[i] = add ? add[i] + kept : kept;
  }
}
__global__ void bias_residual(float* out, const float* bias, const float* residual, int64_t N, int OC) {
  TROUPE_GRID_STRIDE(i, N * OC) {
    float v = residual ? residual[i] : 0.0f;
    if (bias) v += bias[i % OC];
    out[i] = v;
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  gelu_fwd<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(out, inp, n);
  TROUPE_CUDA_LAUNCHED();
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  gelu_bwd<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(dinp, inp, dout, n);
  TROUPE_CUDA_LAUNCHED();
}
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  add_k<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(out, a, b, n);
  TROUPE_CUDA_LAUNCHED();
}
void scale(float* x, int64_t n, float f, cudaStream_t s) {
  if (n <= 0) return;
  scale_k<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(x, n, f);
  TROUPE_CUDA_LAUNCHED();
}
void dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols, int T,
             const DropoutMask& drop, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  dropout_k<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(out, in, add, first_row, rows, cols, T, drop);
  TROUPE_CUDA_LAUNCHED();
}
void bias_residual_init(float* out, const float* bias, const float* residual, int N, int OC, cudaStream_t s) {
  const int64_t n = int64_t(N) * OC;
  if (n <= 0) return;
  bias_residual<<<grid_for(n, kThreads, kMaxBlocks), kThreads, 0, s>>>(out, bias, residual, N, OC);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
