// oneDNN's sgemm (dnnl_sgemm), loaded at run time from Debian's libdnnl2.
//
// The build neither needs nor links oneDNN: the first call to dnnl_sgemm_loaded()
// dlopens libdnnl.so.2 (RTLD_LOCAL, so nothing it exports meets the rest of the
// process) and looks up dnnl_sgemm, dnnl_version, dnnl_set_max_cpu_isa,
// dnnl_get_effective_cpu_isa and, from the OpenMP runtime it links (Debian builds it
// with GNU OpenMP), omp_set_num_threads. A library that is missing or lacks one of
// these is "not loaded", with the reason kept for messages.
//
// Threads: troupe parallelises each GEMM itself (kernels/cpu/gemm.h), so every calling
// thread sets its own OpenMP thread count to 1 before its first call (the count is
// per thread in OpenMP); oneDNN then runs each call on the caller alone, with its
// blocking fixed by the shape and its ISA, so a call's result is deterministic.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/isa.h"

namespace troupe::kernels::cpu {

// The parts of oneDNN 2.x's C API that troupe calls (oneapi/dnnl/dnnl.h and
// dnnl_types.h), declared here so that nothing needs oneDNN's headers
// (bench/sgemm_candidates.cpp uses them too).
namespace dnnl_api {
using Sgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
struct Version {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using VersionFn = const Version* (*)();
using SetMaxCpuIsa = int (*)(int isa);
using EffectiveCpuIsa = int (*)();
constexpr int kSuccess = 0;
constexpr int kIsaAvx2 = 0x7, kIsaAvx512Core = 0x27;
}  // namespace dnnl_api

// Loads the library once per process; false when it is not there (then
// dnnl_load_error() says why). Thread-safe.
bool dnnl_sgemm_loaded();
const std::string& dnnl_load_error();

// Caps the kernels oneDNN may dispatch to at `isa` (AVX2 or AVX-512 core); must run
// before the first dnnl_sgemm_single (gemm_kernel() does it). Throws
// std::runtime_error when oneDNN refuses.
void dnnl_limit_isa(Isa isa);

// "oneDNN 2.6.3 dnnl_sgemm, avx512_core kernels" (the ISA it dispatches to now).
std::string dnnl_description();

// One thread's row-major C[M, N] = alpha op(A) op(B) + beta C (cblas_sgemm's
// semantics; beta 0 does not read C). Throws std::runtime_error naming the call when
// oneDNN returns an error status. Requires dnnl_sgemm_loaded().
void dnnl_sgemm_single(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace troupe::kernels::cpu
