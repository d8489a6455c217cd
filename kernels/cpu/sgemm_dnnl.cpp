#include "kernels/cpu/sgemm_dnnl.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace troupe::kernels::cpu {
namespace {

using OmpSetNumThreads = void (*)(int);
using dnnl_api::kIsaAvx2;
using dnnl_api::kIsaAvx512Core;
using dnnl_api::kSuccess;

constexpr const char* kLibrary = "libdnnl.so.2";

struct Dnnl {
  bool loaded = false;
  std::string error;
  dnnl_api::Sgemm sgemm = nullptr;
  dnnl_api::VersionFn version = nullptr;
  dnnl_api::SetMaxCpuIsa set_max_isa = nullptr;
  dnnl_api::EffectiveCpuIsa effective_isa = nullptr;
  OmpSetNumThreads omp_set_num_threads = nullptr;
};

const Dnnl& dnnl() {
  static const Dnnl d = [] {
    Dnnl out;
    void* h = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      out.error = std::string(kLibrary) + " not loaded (" + (e ? e : "dlopen failed") +
                  "; Debian's package libdnnl2, installed by scripts/setup.sh)";
      return out;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(h, name);
      if (!p && out.error.empty()) out.error = std::string(kLibrary) + " has no symbol " + name;
      return p;
    };
    out.sgemm = reinterpret_cast<dnnl_api::Sgemm>(sym("dnnl_sgemm"));
    out.version = reinterpret_cast<dnnl_api::VersionFn>(sym("dnnl_version"));
    out.set_max_isa = reinterpret_cast<dnnl_api::SetMaxCpuIsa>(sym("dnnl_set_max_cpu_isa"));
    out.effective_isa = reinterpret_cast<dnnl_api::EffectiveCpuIsa>(sym("dnnl_get_effective_cpu_isa"));
    // From the OpenMP runtime libdnnl links (found through the handle's dependencies).
    out.omp_set_num_threads = reinterpret_cast<OmpSetNumThreads>(sym("omp_set_num_threads"));
    out.loaded = out.error.empty();
    return out;  // the handle stays open for the process's life
  }();
  return d;
}

const char* isa_text(int isa) {
  switch (isa) {
    case 0x1: return "sse41";
    case 0x3: return "avx";
    case kIsaAvx2: return "avx2";
    case 0x407: return "avx2_vnni";
    case kIsaAvx512Core: return "avx512_core";
    case 0x67: return "avx512_core_vnni";
    case 0xe7: return "avx512_core_bf16";
    case 0x3e7: return "avx512_core_amx";
    default: return "unknown";
  }
}

}  // namespace

bool dnnl_sgemm_loaded() { return dnnl().loaded; }

const std::string& dnnl_load_error() { return dnnl().error; }

void dnnl_limit_isa(Isa isa) {
  static std::once_flag once;
  std::call_once(once, [isa] {
    // dnnl_set_max_cpu_isa is accepted once, before any kernel is generated.
    const int cap = isa == Isa::kAvx512 ? kIsaAvx512Core : kIsaAvx2;
    if (dnnl().set_max_isa(cap) != kSuccess)
      throw std::runtime_error(std::string("oneDNN (") + kLibrary + ") refused dnnl_set_max_cpu_isa(" +
                               isa_text(cap) + ")");
  });
}

std::string dnnl_description() {
  const dnnl_api::Version* v = dnnl().version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " dnnl_sgemm, " + isa_text(dnnl().effective_isa()) + " kernels";
}

void dnnl_sgemm_single(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Dnnl& d = dnnl();
  // OpenMP's thread count is per thread: this caller runs each call alone.
  thread_local const bool one_thread = (d.omp_set_num_threads(1), true);
  (void)one_thread;
  const int status =
      d.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (status != kSuccess)
    throw std::runtime_error("dnnl_sgemm(" + std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N") + ", M " +
                             std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K) +
                             ", lda " + std::to_string(lda) + ", ldb " + std::to_string(ldb) + ", ldc " +
                             std::to_string(ldc) + ") returned status " + std::to_string(status));
}

}  // namespace troupe::kernels::cpu
