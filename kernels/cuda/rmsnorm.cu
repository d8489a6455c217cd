// RMSNorm over the last dimension (Llama's norm): one warp per row for the row work, and
// the deterministic column reduction (column_reduce.cuh) for the weight gradient.
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

// out[n, :] = x * rstd * weight, rstd[n] = 1 / sqrt(mean(x^2) + eps).
__global__ void rms_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += kWarp) ss += x[c] * x[c];
  const float r = 1.0f / sqrtf(warp_sum(ss) / float(C) + eps);
  float* o = out + row * C;
  for (int c = lane; c < C; c += kWarp) o[c] = x[c] * r * weight[c];
  if (lane == 0) rstd[row] = r;
}

// dinp[n, :] += rstd * (dnorm - xhat * mean(dnorm * xhat)), dnorm = dout * weight, xhat = x * rstd.
__global__ void rms_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                   const float* rstd, int N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* d = dout + row * C;
  const float r = rstd[row];
  float a = 0.0f;
  for (int c = lane; c < C; c += kWarp) a += (d[c] * weight[c]) * (x[c] * r);
  const float m = warp_sum(a) / float(C);
  float* g = dinp + row * C;
  for (int c = lane; c < C; c += kWarp) g[c] += r * (d[c] * weight[c] - (x[c] * r) * m);
}

struct RmsWeightGradLoader {  // dout * xhat
  const float *dout, *inp, *rstd;
  int C;
  __device__ float operator()(int64_t n, int c) const { return dout[n * C + c] * (inp[n * C + c] * rstd[n]); }
};

__global__ void rms_weight_chunks(float* scratch, RmsWeightGradLoader load, int N, int C) {
  column_chunk_sum(scratch, load, N, C);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     cudaStream_t s) {
  if (N <= 0) return;
  rms_forward<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock * kWarp, 0, s>>>(out, rstd, inp, weight, N, C,
                                                                                        eps);
  TROUPE_CUDA_LAUNCHED();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t s) {
  if (N <= 0) return;
  rms_backward_input<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, kRowsPerBlock * kWarp, 0, s>>>(dinp, dout, inp, weight,
                                                                                               rstd, N, C);
  TROUPE_CUDA_LAUNCHED();
  const int chunks = (N + kColumnChunkRows - 1) / kColumnChunkRows;
  rms_weight_chunks<<<dim3((C + 31) / 32, chunks), dim3(32, kColumnLanes), 0, s>>>(
      scratch, RmsWeightGradLoader{dout, inp, rstd, C}, N, C);
  TROUPE_CUDA_LAUNCHED();
  column_chunks_finish(dweight, scratch, chunks, C, s);
}

}  // namespace troupe::kernels::cuda::launch
