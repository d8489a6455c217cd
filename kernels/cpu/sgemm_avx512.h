// troupe's own single-threaded sgemm for CPUs with AVX-512 (kernels/cpu/isa.h), the
// CPU device's GEMM there whatever kernel OpenBLAS picked (docs/compute.md, "GEMM").
//
// Row-major C[M, N] = alpha * op(A)[M, K] op(B)[K, N] + beta * C, cblas_sgemm's
// semantics (beta == 0: C is not read). Goto-style blocking: op(B) is packed in
// blocks of kKc x kNc, op(A) in blocks of kMc x kKc, and a 12 x 32 register tile (24
// zmm accumulators) runs over each pair of micro-panels.
//
// Order of the sums, fixed by K alone: every element of C adds its products in k
// order within each run of kKc k's (one fused multiply-add chain from 0), and the runs
// in k order into C (run 0: alpha * acc + beta * C; later runs: C + alpha * acc). So
// an element's bits depend neither on M, N, the leading dimensions, nor on which
// block of C a participant computes it in: the CPU device's GEMM gives the same bits
// for any thread count on this kernel.
//
// Leading dimensions must stay below 2^31 / 16 (the packing gathers 16 rows with 32-bit
// offsets). Call only when cpu_has_avx512() (the code is compiled for AVX-512 alone). Packing
// buffers are per thread and grow once to the largest block.
#pragma once

namespace troupe::kernels::cpu {

void sgemm_avx512(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace troupe::kernels::cpu
