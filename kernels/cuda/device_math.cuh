// Device-side helpers shared by the .cu files: launch geometry, warp and block
// reductions with a fixed combination order, and the tanh-GELU in the same form as
// the CPU kernels (kernels/cpu/vec_math.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

constexpr int kWarp = 32;

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = int64_t(1) << 20) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return unsigned(b < max_blocks ? b : max_blocks);
}

// Butterfly reductions: every lane ends with the same value, combined in an order
// fixed by the lane pattern (deterministic).
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024); every thread gets
// the result. `shared` holds at least 32 values. Fixed order: warps reduce
// themselves, then warp 0 reduces the per-warp values.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : T(0);
  r = warp_sum(r);
  return r;
}
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

// tanh-approximation GELU with tanh(u) = 1 - 2 / (exp(2u) + 1), as on the CPU:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ __forceinline__ float gelu_tanh_arg(float x, float* du_dx) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float x2 = x * x;
  const float u = k0 * (k1 * x2 * x + x);
  if (du_dx) *du_dx = k0 * (3.0f * 0.044715f * x2 + 1.0f);
  const float e = expf(u + u);
  return 1.0f - 2.0f / (e + 1.0f);
}
__device__ __forceinline__ float gelu(float x) {
  const float t = gelu_tanh_arg(x, nullptr);
  return 0.5f * x * (1.0f + t);
}
__device__ __forceinline__ float gelu_grad(float x) {
  float du;
  const float t = gelu_tanh_arg(x, &du);
  return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * du);
}

}  // namespace troupe::kernels::cuda
