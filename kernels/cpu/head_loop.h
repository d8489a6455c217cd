// The attention kernels' (gqa_attention.cpp) loop over heads: a static split of
// independent (batch row, head) pairs over the pool with per-participant scratch, and
// the products of the participant that owns a pair.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/small_gemm_avx512.h"

namespace troupe::kernels::cpu {

// Runs f(b, h, participant) for every pair (b < B, h < H); pairs are split statically
// (contiguous chunks in b-major order) over participants, and each participant first
// gets `floats` floats of scratch (Scratch::per_thread[p], grown once).
template <class F>
void for_each_head(ThreadPool& pool, Scratch& scratch, int B, int H, size_t floats, F&& f) {
  scratch.per_thread.resize(size_t(pool.size()));
  for (int p = 0; p < pool.size(); ++p) scratch.thread_floats(p, floats);
  const int64_t pairs = int64_t(B) * H;
  pool.run([&](int p) {
    auto [b, e] = ThreadPool::chunk(pairs, p, pool.size());
    for (int64_t i = b; i < e; ++i) f(int(i / H), int(i % H), p);
  });
}

// One participant's product of a head (row-major, B never transposed: the kernels hand
// it K^T or V^T copied once per head where they need A B^T):
//   C[M, N] = alpha * op(A)[M, K] B[K, N] + beta * C,  op(A) = A or A^T (trans_a).
// Where the kernels run AVX-512 and the process's GEMM is not OpenBLAS (oneDNN or troupe's
// own, kernels/cpu/gemm.h), products with K and N at most kSmallProduct run
// small_gemm_avx512: no packing, since B (256 x 256 floats at most) stays in the core's
// caches, and oneDNN's fixed cost per call dominated products this small
// (bench/attention_bench: 1.1-1.3x on the heads of the step cases, 0.96x on T = 1024
// before N was bounded too). Larger products and every product under OpenBLAS take the
// process's sgemm.
// `small`: small_products() (or false, for bench/attention_bench's baseline).
inline constexpr int kSmallProduct = 256;
inline bool small_products() {
  static const bool small = active_isa() == Isa::kAvx512 && gemm_kernel() != GemmKernel::kOpenBlas;
  return small;
}
inline void head_product(bool small, bool trans_a, int M, int N, int K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (small && K <= kSmallProduct && N <= kSmallProduct)
    small_gemm_avx512(M, N, K, alpha, A, trans_a ? 1 : lda, trans_a ? lda : 1, B, ldb, beta, C, ldc);
  else
    sgemm_single(trans_a, false, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// dst[hs, T] (row stride T) = the transpose of src's T rows of hs (row stride ld): 8 x 8
// blocks through registers, the edges element by element (a plain copy: the same
// values whatever the path).
inline void transpose_head(float* dst, const float* src, int T, int hs, int64_t ld) {
  const int T8 = T & ~7, hs8 = hs & ~7;
  for (int t0 = 0; t0 < T8; t0 += 8)
    for (int k0 = 0; k0 < hs8; k0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + int64_t(t0 + i) * ld + k0);
      // 8 x 8 transpose: unpack pairs, shuffle quads, swap 128-bit halves.
      const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
      const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
      const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
      const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
      const __m256 c[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                           _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                           _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                           _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + int64_t(k0 + i) * T + t0, c[i]);
    }
  for (int t = 0; t < T; ++t)
    for (int k = t < T8 ? hs8 : 0; k < hs; ++k) dst[int64_t(k) * T + t] = src[int64_t(t) * ld + k];
}

}  // namespace troupe::kernels::cpu
