#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <mutex>

namespace troupe::kernels::cpu {

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

GemmBlock gemm_block(int M, int N, int p, int parts) {
  // Split the longer side into `parts` runs of whole 16-wide units.
  const bool split_n = N >= M;
  const int len = split_n ? N : M;
  const int units = (len + 15) / 16;
  const auto [u0, u1] = ThreadPool::chunk(units, p, parts);
  const int b = std::min(len, int(u0) * 16), e = std::min(len, int(u1) * 16);
  if (split_n) return {0, M, b, e};
  return {b, e, 0, N};
}

void gemm_block_call(const GemmBlock& blk, bool trans_a, bool trans_b, int K, float alpha,
                     const float* A, int lda, const float* B, int ldb, float beta, float* C,
                     int ldc) {
  // Offset A to the block's rows and B to its columns (op(A) is [M, K], op(B) is [K, N]).
  const float* a = trans_a ? A + blk.m0 : A + int64_t(blk.m0) * lda;
  const float* b = trans_b ? B + int64_t(blk.n0) * ldb : B + blk.n0;
  float* c = C + int64_t(blk.m0) * ldc + blk.n0;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, blk.m1 - blk.m0, blk.n1 - blk.n0, K, alpha, a,
              lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe::kernels::cpu
