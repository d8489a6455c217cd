// The non-GEMM parts of attention (the GEMMs are cuBLAS calls in
// cuda_attention.cpp): layout changes between [B, T, 3C] / [B, T, C] rows and
// per-head [B, NH, T, hs] blocks, and the masked row softmax with its backward.
// One warp per score row; a row's reductions are lane-strided sums combined by a
// butterfly, so the result depends on T only.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dropout.h"

namespace troupe::kernels::cuda::launch {
namespace {

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// dst_k[((b * NH + h) * T + t) * hs + i] = src[(b * T + t) * ld + k * C + h * hs + i] for k < parts.
template <class Out>
__global__ void to_heads(Out* d0, Out* d1, Out* d2, const float* src, int64_t ld, int parts, int B, int T, int C,
                         int NH) {
  const int hs = C / NH;
  const int64_t per = int64_t(B) * T * C;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < per * parts;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(g / per);
    const int64_t j = g % per;
    const int i = int(j % hs);
    const int64_t t = (j / hs) % T;
    const int64_t bh = j / (int64_t(hs) * T);
    const int64_t b = bh / NH, h = bh % NH;
    Out* dst = k == 0 ? d0 : (k == 1 ? d1 : d2);
    store(dst + j, src[(b * T + t) * ld + int64_t(k) * C + h * hs + i]);
  }
}

__global__ void from_heads(float* dst, int64_t ld, const float* src, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t per = int64_t(B) * T * C;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < per; j += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(j % hs);
    const int64_t t = (j / hs) % T;
    const int64_t bh = j / (int64_t(hs) * T);
    const int64_t b = bh / NH, h = bh % NH;
    dst[(b * T + t) * ld + h * hs + i] = src[j];
  }
}

constexpr int kRowsPerBlock = 8;

// Whether element j of score row (b, h, t) survives attention dropout (always when off).
__device__ __forceinline__ float keep_scale(const DropoutMask& drop, uint64_t key, int64_t b, int t, int j) {
  if (!drop.on()) return 1.0f;
  return dropout_keep(drop, key, drop.first_slot + b, t, j) ? drop.scale : 0.0f;
}

template <class Op>
__global__ void softmax_fwd(float* att, Op* p_gemm, const int32_t* doc_start, int B, int NH, int T, float scale,
                            DropoutMask drop) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= int64_t(B) * NH * T) return;
  const int t = int(r % T);
  const int64_t b = r / (int64_t(T) * NH);
  const int h = int((r / T) % NH);
  const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
  const int s0 = doc_start[b * T + t];
  float* p = att + r * T;
  float m = -INFINITY;
  for (int j = s0 + lane; j <= t; j += kWarp) m = fmaxf(m, p[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = s0 + lane; j <= t; j += kWarp) sum += expf((p[j] - m) * scale);
  const float inv = 1.0f / warp_sum(sum);
  Op* q = p_gemm ? p_gemm + r * T : nullptr;
  for (int j = lane; j < T; j += kWarp) {
    const bool in = j >= s0 && j <= t;
    const float v = in ? expf((p[j] - m) * scale) * inv : 0.0f;
    p[j] = v;
    if (q) store(q + j, in ? v * keep_scale(drop, key, b, t, j) : 0.0f);
  }
}

template <class Out, class Op>
__global__ void softmax_bwd(Out* ds, Op* p_gemm, const float* att, const float* dp, const int32_t* doc_start, int B,
                            int NH, int T, DropoutMask drop) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= int64_t(B) * NH * T) return;
  const int t = int(r % T);
  const int64_t b = r / (int64_t(T) * NH);
  const int h = int((r / T) % NH);
  const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
  const int s0 = doc_start[b * T + t];
  const float* p = att + r * T;
  const float* d = dp + r * T;
  float dot = 0.0f;
  for (int j = s0 + lane; j <= t; j += kWarp) dot += p[j] * (d[j] * keep_scale(drop, key, b, t, j));
  dot = warp_sum(dot);
  Out* o = ds + r * T;
  Op* q = p_gemm ? p_gemm + r * T : nullptr;
  for (int j = lane; j < T; j += kWarp) {
    const float pj = p[j];
    const bool in = j >= s0 && j <= t;
    const float ks = in ? keep_scale(drop, key, b, t, j) : 0.0f;
    store(o + j, in ? pj * (d[j] * ks - dot) : 0.0f);
    if (q) store(q + j, drop.on() ? pj * ks : pj);
  }
}

unsigned row_blocks(int B, int NH, int T) {
  return unsigned((int64_t(B) * NH * T + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void qkv_to_heads(void* q, void* k, void* v, GemmType t, const float* qkv, int B, int T, int C, int NH,
                  cudaStream_t s) {
  const int64_t n = int64_t(3) * B * T * C;
  if (n <= 0) return;
  if (t == GemmType::kBf16)
    to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(static_cast<__nv_bfloat16*>(q), static_cast<__nv_bfloat16*>(k),
                                                     static_cast<__nv_bfloat16*>(v), qkv, 3 * int64_t(C), 3, B, T, C,
                                                     NH);
  else
    to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(static_cast<float*>(q), static_cast<float*>(k),
                                                     static_cast<float*>(v), qkv, 3 * int64_t(C), 3, B, T, C, NH);
  TROUPE_CUDA_LAUNCHED();
}

void rows_to_heads(void* dst, GemmType t, const float* src, int B, int T, int C, int NH, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  if (n <= 0) return;
  if (t == GemmType::kBf16) {
    auto* d = static_cast<__nv_bfloat16*>(dst);
    to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(d, d, d, src, int64_t(C), 1, B, T, C, NH);
  } else {
    auto* d = static_cast<float*>(dst);
    to_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(d, d, d, src, int64_t(C), 1, B, T, C, NH);
  }
  TROUPE_CUDA_LAUNCHED();
}

void heads_to_rows(float* dst, int64_t ld, const float* src, int B, int T, int C, int NH, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  if (n <= 0) return;
  from_heads<<<grid_for(n, 256, 65536), 256, 0, s>>>(dst, ld, src, B, T, C, NH);
  TROUPE_CUDA_LAUNCHED();
}

void attention_softmax_forward(float* att, void* p_gemm, GemmType t, const int32_t* doc_start, int B, int NH, int T,
                               float scale, const DropoutMask& drop, cudaStream_t s) {
  if (int64_t(B) * NH * T <= 0) return;
  if (t == GemmType::kBf16)
    softmax_fwd<<<row_blocks(B, NH, T), kRowsPerBlock * kWarp, 0, s>>>(att, static_cast<__nv_bfloat16*>(p_gemm),
                                                                       doc_start, B, NH, T, scale, drop);
  else
    softmax_fwd<<<row_blocks(B, NH, T), kRowsPerBlock * kWarp, 0, s>>>(att, static_cast<float*>(p_gemm), doc_start,
                                                                       B, NH, T, scale, drop);
  TROUPE_CUDA_LAUNCHED();
}

void attention_softmax_backward(void* ds, GemmType t, void* p_gemm, const float* att, const float* dp,
                                const int32_t* doc_start, int B, int NH, int T, const DropoutMask& drop,
                                cudaStream_t s) {
  if (int64_t(B) * NH * T <= 0) return;
  if (t == GemmType::kBf16)
    softmax_bwd<<<row_blocks(B, NH, T), kRowsPerBlock * kWarp, 0, s>>>(
        static_cast<__nv_bfloat16*>(ds), static_cast<__nv_bfloat16*>(p_gemm), att, dp, doc_start, B, NH, T, drop);
  else
    softmax_bwd<<<row_blocks(B, NH, T), kRowsPerBlock * kWarp, 0, s>>>(
        static_cast<float*>(ds), static_cast<float*>(p_gemm), att, dp, doc_start, B, NH, T, drop);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
