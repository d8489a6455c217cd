// LayerNorm over the last dimension: one warp per row for the row work (two passes,
// mean then centred variance, as on the CPU), and the deterministic column
// reduction (column_reduce.cuh) for the weight and bias gradients.
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

__global__ void ln_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                           const float* bias, int N, int C, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += kWarp) s += x[c];
  const float m = warp_sum(s) / float(C);
  float v = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(v) / float(C) + eps);
  float* o = out + row * C;
  for (int c = lane; c < C; c += kWarp) o[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
__global__ void ln_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, int N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* d = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float a1 = 0.0f, a2 = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (x[c] - m) * r;
    const float dn = d[c] * weight[c];
    a1 += dn;
    a2 += dn * xhat;
  }
  const float m1 = warp_sum(a1) / float(C), m2 = warp_sum(a2) / float(C);
  float* g = dinp + row * C;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (x[c] - m) * r;
    const float dn = d[c] * weight[c];
    g[c] += r * (dn - m1 - xhat * m2);
  }
}

struct WeightGradLoader {  // dout * xhat
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float operator()(int64_t n, int c) const {
    return dout[n * C + c] * ((inp[n * C + c] - mean[n]) * rstd[n]);
  }
};
struct BiasGradLoader {
  const float* dout;
  int C;
  __device__ float operator()(int64_t n, int c) const { return dout[n * C + c]; }
};

__global__ void ln_weight_chunks(float* scratch, WeightGradLoader load, int N, int C) {
  column_chunk_sum(scratch, load, N, C);
}
__global__ void ln_bias_chunks(float* scratch, BiasGradLoader load, int N, int C) {
  column_chunk_sum(scratch, load, N, C);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t s) {
  if (N <= 0) return;
  ln_forward<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock * kWarp, 0, s>>>(out, mean, rstd, inp, weight,
                                                                                       bias, N, C, eps);
  TROUPE_CUDA_LAUNCHED();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, float* scratch,
                        cudaStream_t s) {
  if (N <= 0) return;
  ln_backward_input<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock * kWarp, 0, s>>>(dinp, dout, inp, weight,
                                                                                              mean, rstd, N, C);
  TROUPE_CUDA_LAUNCHED();
  const int chunks = (N + kColumnChunkRows - 1) / kColumnChunkRows;
  float* sw = scratch;
  float* sb = scratch + column_reduce_scratch(N, C);
  const dim3 grid((C + 31) / 32, chunks), block(32, kColumnLanes);
  ln_weight_chunks<<<grid, block, 0, s>>>(sw, WeightGradLoader{dout, inp, mean, rstd, C}, N, C);
  TROUPE_CUDA_LAUNCHED();
  ln_bias_chunks<<<grid, block, 0, s>>>(sb, BiasGradLoader{dout, C}, N, C);
  TROUPE_CUDA_LAUNCHED();
  column_chunks_finish(dweight, sw, chunks, C, s);
  column_chunks_finish(dbias, sb, chunks, C, s);
}

}  // namespace troupe::kernels::cuda::launch
