// fp32 -> bf16 (and packed fp32) copies of GEMM operands.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

// One thread per 4 consecutive elements of a row when cols and ld allow 16-byte
// loads, else one per element; grid-stride over the packed index.
__global__ void to_bf16_vec4(__nv_bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t quads = cols / 4, total = rows * quads;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / quads, c = (i % quads) * 4;
    const float4 v = *reinterpret_cast<const float4*>(src + r * ld + c);
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(dst + r * cols + c);
    d[0] = lo;
    d[1] = hi;
  }
}

__global__ void to_bf16_scalar(__nv_bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[i] = __float2bfloat16_rn(src[r * ld + c]);
  }
}

__global__ void pack_f32(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[i] = src[r * ld + c];
  }
}

}  // namespace

void f32_to_bf16_2d(__nv_bfloat16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kThreads = 256;
  const bool vec = cols % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % 8 == 0;
  if (vec) {
    to_bf16_vec4<<<grid_for(rows * (cols / 4), kThreads, 65536), kThreads, 0, s>>>(dst, src, rows, cols, ld);
  } else {
    to_bf16_scalar<<<grid_for(rows * cols, kThreads, 65536), kThreads, 0, s>>>(dst, src, rows, cols, ld);
  }
  TROUPE_CUDA_LAUNCHED();
}

void f32_pack_2d(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kThreads = 256;
  pack_f32<<<grid_for(rows * cols, kThreads, 65536), kThreads, 0, s>>>(dst, src, rows, cols, ld);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
