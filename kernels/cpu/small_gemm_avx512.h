// A GEMM for the attention's small per-head products on CPUs with AVX-512
// (kernels/cpu/head_loop.h): no packing, a register tile of up to 6 rows x 64 columns
// (4 zmm wide) over B's rows, since every operand of a head (at most T x hs and T x T
// floats) already sits in the core's caches. Row-major B and C, A through strides:
//   C[M, N] = alpha * sum_k A(i, k) B[k, j] + beta * C,  A(i, k) = A[i a_rs + k a_cs]
// (a_rs = lda, a_cs = 1 for A; a_rs = 1, a_cs = lda for A^T). beta = 0: C is not read.
//
// Order of the sums, fixed by K alone: every element adds its K products in k order in
// one fused multiply-add chain from 0, then C = alpha * acc (beta = 0), C + alpha * acc
// (beta = 1) or beta * C + alpha * acc. So an element's bits depend neither on M, N, the
// strides nor on where the tile falls. Call only when cpu_has_avx512() (the file is
// compiled for AVX-512 alone).
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

void small_gemm_avx512(int M, int N, int K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
                       int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace troupe::kernels::cpu
