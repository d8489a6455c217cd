#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/sgemm_check.h"
#include "kernels/cpu/sgemm_dnnl.h"
#include "kernels/cpu/sgemm_panels.h"

namespace troupe::kernels::cpu {
namespace {

// The vector ISA of an OpenBLAS (0.3.21) DYNAMIC_ARCH core name.
const char* core_isa(const std::string& core) {
  if (core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids") return "AVX-512";
  if (core == "Haswell" || core == "Zen") return "AVX2";
  if (core == "Sandybridge") return "AVX";
  return "SSE";
}

}  // namespace

GemmKernel choose_gemm_kernel(const GemmChoiceInputs& in) {
  const std::string want = in.env ? in.env : "";
  if (want.empty() || want == "auto") {
    // Measured (docs/performance.md, "AVX-512"): on AVX-512, oneDNN's sgemm was the
    // fastest correct candidate on both machines and under both OpenBLAS settings; capped
    // at AVX2 it ran the step slower than OpenBLAS, so AVX2 keeps OpenBLAS. Without it,
    // OpenBLAS's own AVX-512 kernels are at least as fast as troupe's and its AVX2 ones
    // (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU) are not on the Intel machine, so the
    // own kernel runs only where OpenBLAS runs below the CPU's ISA.
    if (in.isa == Isa::kAvx512 && in.dnnl_loaded) return GemmKernel::kDnnl;
    const bool blas_avx512 = std::string(core_isa(in.openblas_core)) == "AVX-512";
    return in.isa == Isa::kAvx512 && !blas_avx512 ? GemmKernel::kOwnAvx512 : GemmKernel::kOpenBlas;
  }
  if (want == "openblas") return GemmKernel::kOpenBlas;
  if (want == "own") {
    if (!in.has_avx512)
      throw std::runtime_error("TROUPE_CPU_GEMM=own: troupe's sgemm needs AVX-512 F/BW/DQ/VL, which this CPU (or its "
                               "OS) lacks; use dnnl, openblas or leave it unset");
    return GemmKernel::kOwnAvx512;
  }
  if (want == "dnnl") {
    if (!in.dnnl_loaded)
      throw std::runtime_error("TROUPE_CPU_GEMM=dnnl: " + in.dnnl_error + "; use openblas or leave it unset");
    return GemmKernel::kDnnl;
  }
  throw std::runtime_error("TROUPE_CPU_GEMM=\"" + want + "\": expected dnnl, openblas, own or auto");
}

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
  gemm_kernel();
}

namespace {

// Why oneDNN does not run where it could have (missing, or failed its check); "" when
// it runs or could not have been chosen. Written once, inside gemm_kernel()'s choice.
std::string& dnnl_not_used() {
  static std::string why;
  return why;
}

}  // namespace

GemmKernel gemm_kernel() {
  // A throw leaves it unset: the next call throws again.
  static const GemmKernel k = [] {
    GemmChoiceInputs in;
    in.env = std::getenv("TROUPE_CPU_GEMM");
    in.isa = active_isa();
    in.openblas_core = openblas_get_corename();
    in.has_avx512 = cpu_has_avx512();
    // oneDNN is not even loaded where the rule would not choose it if it were there.
    GemmChoiceInputs if_loaded = in;
    if_loaded.dnnl_loaded = true;
    if (choose_gemm_kernel(if_loaded) == GemmKernel::kDnnl) {
      in.dnnl_loaded = dnnl_sgemm_loaded();
      if (!in.dnnl_loaded) {
        in.dnnl_error = dnnl_load_error();
      } else {
        dnnl_limit_isa(in.isa);  // before its first call: the check runs the kernels the run would
        const std::string failed = sgemm_self_check(dnnl_sgemm_single);
        if (!failed.empty()) {
          in.dnnl_loaded = false;
          in.dnnl_error = dnnl_description() + " failed troupe's check against a double product (" + failed + ")";
        }
      }
    }
    const GemmKernel chosen = choose_gemm_kernel(in);
    if (chosen != GemmKernel::kDnnl) dnnl_not_used() = in.dnnl_error;
    return chosen;
  }();
  return k;
}

void sgemm_single(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const GemmKernel k = gemm_kernel();
  if (k == GemmKernel::kDnnl) {
    if (trans_a && !trans_b && tall_tn_panels_pay(M, N, K))  // kernels/cpu/sgemm_panels.h
      sgemm_tn_by_panels(dnnl_sgemm_single, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
      dnnl_sgemm_single(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (k == GemmKernel::kOwnAvx512) {
    sgemm_avx512(trans_a, trans_b, M, N, K, alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

std::string blas_description() {
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
  const std::string config = openblas_get_config();
  const size_t second = config.find(' ', config.find(' ') + 1);
  const std::string name = config.substr(0, second);
  const std::string core = openblas_get_corename();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::string s = name + ", " + core + " kernels (" + core_isa(core) + ") of a CPU with " +
                  (cpu_has_avx512() ? "AVX-512" : "AVX2");
  s += env ? std::string(" (OPENBLAS_CORETYPE=") + env + ")" : std::string(" (chosen by OpenBLAS from cpuid)");
  s += ", called single-threaded by each participant";
  return s;
}

std::string compute_description() {
  const Isa isa = active_isa();
  // troupe's loops (norms, AdamW, ...) have AVX2 variants only: none is a measurable
  // compute-bound share of a step (docs/performance.md); GELU and the exp rows of the
  // softmax and the cross-entropy have AVX-512 ones too (kernels/cpu/gelu.h, exp_rows.h,
  // bitwise the same), so the ISA picks the GEMM and those loops' speed.
  std::string s = "CPU " + cpu_features_line() + "; ISA " + isa_name(isa) +
                  (std::getenv("TROUPE_CPU_ISA") ? " (TROUPE_CPU_ISA)" : " (the CPU's best)") +
                  (isa == Isa::kAvx512 ? ", troupe's loops AVX2 (GELU, softmax and cross-entropy exps AVX-512); GEMM "
                                       : ", troupe's loops AVX2; GEMM ");
  if (gemm_kernel() == GemmKernel::kDnnl)
    s += dnnl_description() + ", one thread per participant, beside " + blas_description() + " (not used for GEMMs)";
  else if (gemm_kernel() == GemmKernel::kOwnAvx512)
    s += "troupe's own AVX-512 sgemm (12x32 packed kernel), beside " + blas_description() + " (not used for GEMMs)";
  else
    s += blas_description();
  if (!dnnl_not_used().empty()) s += "; oneDNN not used: " + dnnl_not_used();
  return s;
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
  sgemm_single(trans_a, trans_b, blk.m1 - blk.m0, blk.n1 - blk.n0, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace troupe::kernels::cpu
