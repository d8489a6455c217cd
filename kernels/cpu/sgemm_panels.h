// A weight-gradient GEMM with a tall C, computed through C's transpose.
//
// C[M, N] = alpha * A^T B + beta * C (row-major; A stored [K, M], B stored [K, N]: the
// TN products dW = inp^T dout of the linear layers, K = the tokens) taken as panels of
// up to kPanelRows rows of C: for each, P[N, rows] = alpha * B^T A[:, rows] by the given
// single-threaded sgemm (beta 0; the wide TN shape) into a per-thread scratch, then
// C[rows, :] = beta * C[rows, :] + P^T (beta 0: C is not read). Why: oneDNN 2.6.3's
// sgemm runs tall TN products with long K at 260-310 GFLOP/s on two participants where
// the same product as panels of C^T runs at 340-370 (Intel Xeon, docs/performance.md,
// "the tall weight gradients"); the short-K ones (K 256, gpt2-124m's tokens) it runs
// at 370-430 directly, and panels lose there (the transpose is then a large share).
//
// Deterministic: every element's sum is the sgemm's over the same K for a panel of a
// fixed shape, and the panels are fixed by M alone (runs of kPanelRows from the block's
// first row), so the same call gives the same bits. The scratch grows once per thread
// to N * kPanelRows floats (at most 2 MiB: tall_tn_panels_pay() caps N at 512).
#pragma once

#include <cstdint>

#include "kernels/cpu/sgemm_check.h"

namespace troupe::kernels::cpu {

constexpr int kPanelRows = 1024;

// Whether the panels pay for a TN product on oneDNN (measured, see above): K at least
// 1024, C at least twice as tall as wide, N at most 512.
bool tall_tn_panels_pay(int M, int N, int K);

void sgemm_tn_by_panels(SgemmFn sgemm, int M, int N, int K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace troupe::kernels::cpu
