// GEMM on the CPU device: cblas_sgemm (OpenBLAS) split over the device's threads.
//
// OpenBLAS's own thread count is process-global (openblas_set_num_threads in 0.3.21),
// while troupe runs several stage devices in one process, each with its own threads.
// So OpenBLAS is kept at 1 thread and each device parallelises a GEMM itself: C is cut
// into one block per participant along its longer dimension (block edges on multiples
// of 16 so that every block keeps OpenBLAS's full register tiles), and every
// participant calls single-threaded cblas_sgemm on its block. Each block is computed
// by one participant only, so the result is fixed by the thread count.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels::cpu {

// The rectangle of C one participant owns: rows [m0, m1), columns [n0, n1).
struct GemmBlock {
  int m0, m1, n0, n1;
};

// Sets OpenBLAS to one thread (process-wide, idempotent). Called by every CpuDevice.
void use_single_threaded_blas();

// The block of C [M, N] that participant p of `parts` owns.
GemmBlock gemm_block(int M, int N, int p, int parts);

// C[M, N] = alpha * op(A) op(B) + beta * C on one participant's block (row-major).
void gemm_block_call(const GemmBlock& blk, bool trans_a, bool trans_b, int K, float alpha,
                     const float* A, int lda, const float* B, int ldb, float beta, float* C,
                     int ldc);

// Below this many multiply-adds a GEMM runs on the calling thread alone.
constexpr int64_t kGemmParallelMin = int64_t(1) << 18;

// Runs the GEMM split over the pool. before(blk) runs on the owner of each block
// before its sgemm (e.g. to write bias + residual into C when beta is 1), after(blk)
// right after it while the block is hot in cache (e.g. a fused activation).
template <class Before, class After>
void gemm_split(ThreadPool& pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
                Before&& before, After&& after) {
  const int parts = int64_t(M) * N * K < kGemmParallelMin ? 1 : pool.size();
  auto body = [&](int p) {
    if (p >= parts) return;
    const GemmBlock blk = gemm_block(M, N, p, parts);
    if (blk.m0 >= blk.m1 || blk.n0 >= blk.n1) return;
    before(blk);
    gemm_block_call(blk, trans_a, trans_b, K, alpha, A, lda, B, ldb, beta, C, ldc);
    after(blk);
  };
  if (parts == 1)
    body(0);
  else
    pool.run(body);
}

inline void gemm(ThreadPool& pool, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                 const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  auto none = [](const GemmBlock&) {};
  gemm_split(pool, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, none, none);
}

}  // namespace troupe::kernels::cpu
