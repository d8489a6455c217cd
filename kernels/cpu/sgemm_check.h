// A library's sgemm checked against a double-precision product before troupe trusts it.
//
// gemm_kernel() (kernels/cpu/gemm.h) runs this once on oneDNN's sgemm, the library
// troupe loads at run time on whatever CPU the user has, before choosing it: every
// transpose pair of three small shapes (one below any register tile, two with
// edges off every tile size, K across one packing block) with padded leading
// dimensions, alpha 1 and 0.5, beta 0 with NaN in C (C must not be read) and beta 1.
// The bound is the one bench/sgemm_candidates.cpp holds every library to:
// |c - ref| <= 1e-5 * sum_k |a_ik b_kj| (fp32 accumulation passes it by 30x; a kernel
// that computes in bf16 or tf32, reads C when beta is 0 or writes past a row misses
// it). It costs under 10 MFLOP (a few milliseconds, once per process).
#pragma once

#include <cstdint>
#include <string>

namespace troupe::kernels::cpu {

// One thread's row-major sgemm with cblas_sgemm's semantics.
using SgemmFn = void (*)(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// "" when every check passes; else the first failure, e.g. "TN 37x45x70 alpha 1 beta 0:
// C[3,7] = nan, a double product gives 1.25 (bound 1.3e-05)" or "... wrote the padding
// of row 2".
std::string sgemm_self_check(SgemmFn sgemm);

// One case of that check, for any shape: A, B and C drawn from `seed` (C NaN when beta
// is 0), leading dimensions padded by 3, 5 and 7; "" or the first failure as above.
std::string sgemm_check_case(SgemmFn sgemm, bool trans_a, bool trans_b, int M, int N, int K, float alpha, float beta,
                             uint32_t seed);

}  // namespace troupe::kernels::cpu
