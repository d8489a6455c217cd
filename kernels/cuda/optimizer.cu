// AdamW on fp32 master weights and moments, and the deterministic sum of squares.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

struct AdamWScalars {
  float b1, b2, c1, c2, gs, lr, bc1, bc2, eps, decay;
};

// The CPU kernel's operation order, with explicitly rounded multiplies and adds
// (__fmul_rn / __fadd_rn are never fused into FMAs); division and square root are
// IEEE-rounded (nvcc's default -prec-div=true -prec-sqrt=true). The CPU fuses three
// products into FMAs (kernels/cpu/optimizer.cpp, adamw_range), so the two agree to an
// ulp or so on the elements where those roundings differ (test/cuda/kernels_test.cpp
// counts the bitwise-equal ones). Element i updated in place; returns its new value.
// Both AdamW kernels run this one spelling.
__device__ __forceinline__ float adamw_one(float* param, const float* grad, float* m, float* v, int64_t i,
                                           const AdamWScalars& a) {
  const float g = __fmul_rn(grad[i], a.gs);
  const float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(a.c1, g));
  const float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(a.c2, __fmul_rn(g, g)));
  const float mhat = __fdiv_rn(mi, a.bc1);
  const float vhat = __fdiv_rn(vi, a.bc2);
  const float u = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), a.eps));
  const float p = __fsub_rn(__fmul_rn(param[i], a.decay), __fmul_rn(a.lr, u));
  param[i] = p;
  m[i] = mi;
  v[i] = vi;
  return p;
}

__global__ void adamw(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_one(param, grad, m, v, i, a);
}

constexpr int kSumThreads = 256;

// Block b: elements [b * kSumSquaresBlock, ...) ; thread k adds k, k + 256, ... in
// double (each square of a float is exact in double), then the block sums its
// threads with the fixed tree of block_sum.
__global__ void sum_squares_blocks(double* partial, const float* x, int64_t n) {
  __shared__ double shared[32];
  const int64_t b0 = int64_t(blockIdx.x) * kSumSquaresBlock;
  const int64_t b1 = b0 + kSumSquaresBlock < n ? b0 + kSumSquaresBlock : n;
  double acc = 0.0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += kSumThreads) {
    const double d = double(x[i]);
    acc += d * d;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_in_order(double* result, const double* partial, int64_t blocks) {
  double total = 0.0;
  for (int64_t i = 0; i < blocks; ++i) total += partial[i];
  *result = total;
}

// adamw over block b's elements [b * kSumSquaresBlock, ...) (thread k: k, k + 256, ...),
// with the update's and the old weights' sums of squares in double, each block summed
// by the fixed tree of block_sum into partial[2 b] (update) and partial[2 b + 1].
__global__ void adamw_norm_blocks(double* partial, float* param, const float* grad, float* m, float* v, int64_t n,
                                  AdamWScalars a) {
  __shared__ double shared[32];
  const int64_t b0 = int64_t(blockIdx.x) * kSumSquaresBlock;
  const int64_t b1 = b0 + kSumSquaresBlock < n ? b0 + kSumSquaresBlock : n;
  double du = 0.0, dw = 0.0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += kSumThreads) {
    const double before = double(param[i]);
    const double d = double(adamw_one(param, grad, m, v, i, a)) - before;
    du += d * d;
    dw += before * before;
  }
  du = block_sum(du, shared);
  dw = block_sum(dw, shared);  // block_sum synchronizes before it reuses `shared`
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = du;
    partial[2 * blockIdx.x + 1] = dw;
  }
}

__global__ void two_sums_in_order(double* results, const double* partial, int64_t blocks) {
  double du = 0.0, dw = 0.0;
  for (int64_t i = 0; i < blocks; ++i) {
    du += partial[2 * i];
    dw += partial[2 * i + 1];
  }
  results[0] = du;
  results[1] = dw;
}

AdamWScalars scalars_of(const AdamWArgs& a) {
  return {a.beta1,           a.beta2,           1.0f - a.beta1, 1.0f - a.beta2,
          a.grad_scale,      a.lr,              a.bias_correction1,
          a.bias_correction2, a.eps,            1.0f - a.lr * a.weight_decay};
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& a,
                  cudaStream_t s) {
  if (n <= 0) return;
  adamw<<<grid_for(n, 256, 65536), 256, 0, s>>>(param, grad, m, v, n, scalars_of(a));
  TROUPE_CUDA_LAUNCHED();
}

int64_t sum_squares_scratch(int64_t n) { return (n + kSumSquaresBlock - 1) / kSumSquaresBlock; }

void sum_squares(double* result, const float* x, int64_t n, double* scratch, cudaStream_t s) {
  const int64_t blocks = sum_squares_scratch(n);
  if (blocks > 0) {
    sum_squares_blocks<<<unsigned(blocks), kSumThreads, 0, s>>>(scratch, x, n);
    TROUPE_CUDA_LAUNCHED();
  }
  sum_in_order<<<1, 1, 0, s>>>(result, scratch, blocks);
  TROUPE_CUDA_LAUNCHED();
}

int64_t adamw_norms_scratch(int64_t n) { return (n + kSumSquaresBlock - 1) / kSumSquaresBlock; }

void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& a,
                        double* results, double* scratch, cudaStream_t s) {
  const int64_t blocks = adamw_norms_scratch(n);
  if (blocks > 0) {
    adamw_norm_blocks<<<unsigned(blocks), kSumThreads, 0, s>>>(scratch, param, grad, m, v, n, scalars_of(a));
    TROUPE_CUDA_LAUNCHED();
  }
  two_sums_in_order<<<1, 1, 0, s>>>(results, scratch, blocks);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
