// The attention kernels' (gqa_attention.cpp) loop over heads: a static split of
// independent (batch row, head) pairs over the pool with per-participant scratch, and
// the products of the participant that owns a pair.
#pragma once

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

// dst[hs, T] (row stride T) = the transpose of src's T rows of hs (row stride ld).
inline void transpose_head(float* dst, const float* src, int T, int hs, int64_t ld) {
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < hs; ++k) dst[int64_t(k) * T + t] = src[int64_t(t) * ld + k];
}

}  // namespace troupe::kernels::cpu
