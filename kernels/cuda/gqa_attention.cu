// Layout changes of grouped-query attention (the GEMMs and the masked softmax are
// cuda_gqa_attention.cpp's cuBLAS calls and attention.cu's softmax): H heads of size hs
// that start at a column of a token row, [B, T, ld], to per-head blocks [B, H, T, hs]
// and back. qkv's q, k and v parts are H = NH, KV and KV heads at columns 0, NH hs and
// (NH + KV) hs; each part is moved once (k and v are never repeated per query head).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// dst[((b H + h) T + t) hs + i] = src[(b T + t) ld + h hs + i]
template <class Out>
__global__ void cols_to_heads(Out* dst, const float* src, int64_t ld, int B, int T, int H, int hs) {
  const int64_t n = int64_t(B) * T * H * hs;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(j % hs);
    const int64_t t = (j / hs) % T;
    const int64_t bh = j / (int64_t(hs) * T);
    const int64_t b = bh / H, h = bh % H;
    put(dst + j, src[(b * T + t) * ld + h * hs + i]);
  }
}

// dst[(b T + t) ld + h hs + i] = src[((b H + h) T + t) hs + i]
__global__ void heads_to_cols(float* dst, int64_t ld, const float* src, int B, int T, int H, int hs) {
  const int64_t n = int64_t(B) * T * H * hs;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(j % hs);
    const int64_t t = (j / hs) % T;
    const int64_t bh = j / (int64_t(hs) * T);
    const int64_t b = bh / H, h = bh % H;
    dst[(b * T + t) * ld + h * hs + i] = src[j];
  }
}

}  // namespace

void columns_to_heads(void* dst, GemmType t, const float* src, int64_t ld, int B, int T, int H, int hs,
                      cudaStream_t s) {
  const int64_t n = int64_t(B) * T * H * hs;
  if (n <= 0) return;
  if (t == GemmType::kBf16)
    cols_to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), src, ld, B, T, H, hs);
  else
    cols_to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(static_cast<float*>(dst), src, ld, B, T, H, hs);
  TROUPE_CUDA_LAUNCHED();
}

void heads_to_columns(float* dst, int64_t ld, const float* src, int B, int T, int H, int hs, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * H * hs;
  if (n <= 0) return;
  heads_to_cols<<<grid_for(n, 256, 65536), 256, 0, s>>>(dst, ld, src, B, T, H, hs);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
