// The attention kernels' (gqa_attention.cpp) loop over heads: a static split of
// independent (batch row, head) pairs over the pool with per-participant scratch, and a
// single-threaded row-major sgemm for the participant that owns a pair.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

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

// Single-threaded sgemm (row-major) on one participant, through the process's kernel (gemm.h).
inline void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm_single(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace troupe::kernels::cpu
