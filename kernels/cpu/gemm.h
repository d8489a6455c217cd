// GEMM on the CPU device: a single-threaded sgemm split over the device's threads.
//
// The sgemm is chosen once per process (gemm_kernel()): oneDNN's dnnl_sgemm
// (kernels/cpu/sgemm_dnnl.h) when the kernels run AVX-512 (kernels/cpu/isa.h) and
// Debian's libdnnl2 can be loaded (it does not read OPENBLAS_CORETYPE, so a
// development machine and a user's run the same GEMM); otherwise troupe's own
// AVX-512 kernel (kernels/cpu/sgemm_avx512.h) when the kernels run AVX-512 and
// OpenBLAS runs below it (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU: the environment
// is left as it is, the startup block prints both), else OpenBLAS's cblas_sgemm with
// whatever kernel OpenBLAS picked (its own cpuid choice, or OPENBLAS_CORETYPE).
// TROUPE_CPU_GEMM=dnnl|openblas|own|auto overrides the choice (dnnl needs the library,
// own needs AVX-512; anything else is an error naming the variable). oneDNN is used
// only after it passed a check against a double product on this CPU
// (kernels/cpu/sgemm_check.h); when it could have run but did not (missing, or failed
// the check), the compute line says why.
//
// OpenBLAS's own thread count is process-global (openblas_set_num_threads in 0.3.21),
// while troupe runs several stage devices in one process, each with its own threads.
// So OpenBLAS is kept at 1 thread and each device parallelises a GEMM itself: C is cut
// into one block per participant along its longer dimension (block edges on multiples
// of 16 so that every block keeps OpenBLAS's full register tiles), and every
// participant calls the single-threaded sgemm on its block. Each block is computed
// by one participant only, so the result is fixed by the thread count (and, with the
// own kernel, independent of it: its sums are fixed by K alone). oneDNN's OpenMP
// runtime is likewise held at one thread per caller.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels::cpu {

// The rectangle of C one participant owns: rows [m0, m1), columns [n0, n1).
struct GemmBlock {
  int m0, m1, n0, n1;
};

// Sets OpenBLAS to one thread (process-wide, idempotent) and makes the process's
// sgemm choice (throws std::runtime_error for a bad TROUPE_CPU_GEMM or
// TROUPE_CPU_ISA). Called by every CpuDevice.
void use_single_threaded_blas();

enum class GemmKernel { kOpenBlas, kOwnAvx512, kDnnl };
GemmKernel gemm_kernel();  // chosen once (see the top of this file)

// What the choice is made from: TROUPE_CPU_GEMM's value (nullptr: unset), the
// kernels' ISA, OpenBLAS's core name (openblas_get_corename), the CPU, and whether
// oneDNN loaded (with the reason when it did not, for the error of TROUPE_CPU_GEMM=dnnl).
struct GemmChoiceInputs {
  const char* env = nullptr;
  Isa isa = Isa::kAvx2;
  std::string openblas_core;
  bool has_avx512 = false;
  bool dnnl_loaded = false;
  std::string dnnl_error;
};
GemmKernel choose_gemm_kernel(const GemmChoiceInputs& in);

// One thread's row-major sgemm (cblas_sgemm's semantics) through the chosen kernel.
void sgemm_single(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The BLAS as the startup block prints it, e.g. "OpenBLAS 0.3.21, Haswell kernels
// (AVX2) of a CPU with AVX-512 (OPENBLAS_CORETYPE=Haswell), called single-threaded by each participant".
std::string blas_description();

// The CPU, the ISA of troupe's kernels and the GEMM that runs, for the startup block
// and benchmarks (one line).
std::string compute_description();

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
