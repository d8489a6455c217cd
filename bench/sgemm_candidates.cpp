// sgemm_candidates: the single-precision GEMM libraries this machine could run, timed
// and checked at the model's GEMM shapes the way the CPU device calls them.
//
//   sgemm_candidates [--threads 2] [--rounds 5] [--cases tiny,small,gpt2-124m]
//                    [--openblas SO] [--blis SO] [--dnnl SO] [--no-own] [--no-device]
//
// Candidates, each loaded with dlopen (RTLD_LOCAL | RTLD_DEEPBIND, so two libraries
// that both export cblas_sgemm do not clash; the benchmark links no BLAS itself):
//   openblas  Debian's libopenblas.so.0 (DYNAMIC_ARCH): the kernel it picks from the CPU,
//             or the one OPENBLAS_CORETYPE forces (run the benchmark under both)
//   blis      Debian's libblis-pthread (libblis.so.4; picks its sub-configuration at
//             run time from cpuid)
//   dnnl      Debian's oneDNN (libdnnl.so.2): dnnl_sgemm, run with one OpenMP thread
//   own       troupe's packed AVX-512 kernel (kernels/cpu/sgemm_avx512.h), when the
//             CPU has AVX-512
//   device    the CPU device's own sgemm_single (kernels/cpu/gemm.h): the kernel this
//             process chose, with oneDNN's tall TN products as panels of C's
//             transpose (kernels/cpu/sgemm_panels.h); --no-device leaves it out
// A library that is not installed is reported and skipped (pass the .so's path to use
// one unpacked elsewhere).
//
// Shapes: every GEMM of a GPT-2 step (forward, input gradient, weight gradient of
// c_attn, attn.c_proj, c_fc, mlp.c_proj and the tied head), for the case's
// M = B*T tokens, width D, padded vocab Vp; attention's per-head GEMMs are left out.
// Each call is made as the CPU device makes it: C cut into one block per participant
// along its longer side (edges on multiples of 16, kernels/cpu/gemm.h), each
// participant a thread calling the library single-threaded on its block, beta = 1.
//
// Correctness, before any timing: every candidate's C against a double-precision
// product on 24 rows (first, last and spread between) of every shape; the bound,
// fixed before the first run, is |c - ref| <= 1e-5 * sum_k |a_ik b_kj| + 1e-30 (fp32
// accumulation over K gives a few units of 2^-24 times that sum for blocked kernels;
// a kernel computing in bf16 or tf32 misses it by 100x). A candidate that fails is
// reported and not timed.
//
// Timing: R rounds; in each round every candidate runs every shape once after one
// warm-up call, candidates alternating. Reported per case: the medians over rounds of
// the case's summed GEMM time (all its shapes, one step's worth), as GFLOP/s, and per
// shape the median GFLOP/s.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/sgemm_dnnl.h"
#include "kernels/cpu/thread_pool.h"
#include "bench/stats.h"

namespace {

using troupe::kernels::cpu::GemmBlock;
using troupe::kernels::cpu::gemm_block;

// Row-major C[M,N] = alpha op(A) op(B) + beta C, one thread.
using Sgemm = std::function<void(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                                 const float* B, int ldb, float beta, float* C, int ldc)>;

struct Candidate {
  Candidate(std::string n, std::string d, Sgemm c) : name(std::move(n)), detail(std::move(d)), call(std::move(c)) {}
  std::string name, detail;
  Sgemm call;
  bool correct = true;
  std::vector<std::vector<double>> seconds;  // [round][shape]
};

// cblas enums (the values every cblas.h uses).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                            float*, int);

void* open_lib(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) std::printf("  skipped %s: %s\n", path.c_str(), dlerror());
  return h;
}

template <class F>
F sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

Sgemm cblas_of(CblasSgemm f) {
  return [f](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
             float beta, float* C, int ldc) {
    f(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  };
}

bool add_openblas(std::vector<Candidate>& out, const std::string& path) {
  void* h = open_lib(path);
  if (!h) return false;
  auto f = sym<CblasSgemm>(h, "cblas_sgemm");
  auto threads = sym<void (*)(int)>(h, "openblas_set_num_threads");
  auto core = sym<char* (*)()>(h, "openblas_get_corename");
  auto config = sym<char* (*)()>(h, "openblas_get_config");
  if (!f || !threads || !core || !config) {
    std::printf("  skipped %s: not OpenBLAS\n", path.c_str());
    return false;
  }
  threads(1);
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  out.push_back({"openblas", std::string(config()) + ", core " + core() +
                                 (env ? std::string(" (OPENBLAS_CORETYPE=") + env + ")" : " (OPENBLAS_CORETYPE unset)"),
                 cblas_of(f)});
  return true;
}

bool add_blis(std::vector<Candidate>& out, const std::string& path) {
  void* h = open_lib(path);
  if (!h) return false;
  auto f = sym<CblasSgemm>(h, "cblas_sgemm");
  auto threads = sym<void (*)(long)>(h, "bli_thread_set_num_threads");
  auto version = sym<const char* (*)()>(h, "bli_info_get_version_str");
  auto arch_id = sym<int (*)()>(h, "bli_arch_query_id");
  auto arch_str = sym<const char* (*)(int)>(h, "bli_arch_string");
  if (!f || !threads || !version || !arch_id || !arch_str) {
    std::printf("  skipped %s: not BLIS\n", path.c_str());
    return false;
  }
  threads(1);
  out.push_back({"blis", std::string("BLIS ") + version() + ", sub-configuration " + arch_str(arch_id()), cblas_of(f)});
  return true;
}

bool add_dnnl(std::vector<Candidate>& out, const std::string& path) {
  void* h = open_lib(path);
  if (!h) return false;
  namespace api = troupe::kernels::cpu::dnnl_api;
  auto f = sym<api::Sgemm>(h, "dnnl_sgemm");
  auto version = sym<api::VersionFn>(h, "dnnl_version");
  if (!f || !version) {
    std::printf("  skipped %s: not oneDNN\n", path.c_str());
    return false;
  }
  const api::Version* v = version();
  char buf[96];
  std::snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (dnnl_sgemm)", v->major, v->minor, v->patch);
  out.push_back({"dnnl", buf,
                 [f](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                     int ldb, float beta, float* C, int ldc) {
                   if (f(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != 0) {
                     std::fprintf(stderr, "dnnl_sgemm failed\n");
                     std::exit(1);
                   }
                 }});
  return true;
}

struct Shape {
  std::string name;
  bool ta, tb;
  int M, N, K;
  double flops() const { return 2.0 * M * N * K; }
};

struct ModelCase {
  const char* name;
  int tokens, width, padded_vocab;
};

const ModelCase kCases[] = {{"tiny", 8 * 64, 64, 256}, {"small", 8 * 128, 256, 4096}, {"gpt2-124m", 4 * 64, 768, 50304}};

// Every GEMM of one GPT-2 step at M tokens, width D, padded vocab Vp (Conv1D weights
// [in, out]: forward NN, input gradient dout W^T (NT), weight gradient inp^T dout (TN)).
std::vector<Shape> shapes_of(const ModelCase& c) {
  const int M = c.tokens, D = c.width, V = c.padded_vocab;
  std::vector<Shape> s;
  const std::pair<const char*, std::pair<int, int>> layers[] = {
      {"c_attn", {D, 3 * D}}, {"attn.c_proj", {D, D}}, {"c_fc", {D, 4 * D}}, {"mlp.c_proj", {4 * D, D}}};
  for (const auto& [name, io] : layers) {
    const auto [in, outw] = io;
    s.push_back({std::string(name) + " fwd", false, false, M, outw, in});
    s.push_back({std::string(name) + " dinp", false, true, M, in, outw});
    s.push_back({std::string(name) + " dW", true, false, in, outw, M});
  }
  s.push_back({"head fwd", false, true, M, V, D});      // logits = x wte^T
  s.push_back({"head dinp", false, false, M, D, V});    // dx = dlogits wte
  s.push_back({"head dW", true, false, V, D, M});       // dwte = dlogits^T x
  return s;
}

struct Operands {
  std::vector<float> A, B, C0, C;
  int lda, ldb, ldc;
};

Operands make_operands(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Operands o;
  const int64_t a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
  const int64_t b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
  o.lda = int(a_cols), o.ldb = int(b_cols), o.ldc = s.N;
  o.A.resize(a_rows * a_cols), o.B.resize(b_rows * b_cols), o.C0.resize(int64_t(s.M) * s.N);
  for (auto& x : o.A) x = u(rng);
  for (auto& x : o.B) x = u(rng);
  for (auto& x : o.C0) x = u(rng);
  o.C = o.C0;
  return o;
}

// One GEMM as the CPU device runs it: the pool's participants, one block of C each.
double run_split(const Candidate& c, const Shape& s, Operands& o, troupe::kernels::cpu::ThreadPool& pool) {
  const int parts = pool.size();
  o.C = o.C0;
  auto body = [&](int p) {
    const GemmBlock b = gemm_block(s.M, s.N, p, parts);
    if (b.m0 >= b.m1 || b.n0 >= b.n1) return;
    const float* a = s.ta ? o.A.data() + b.m0 : o.A.data() + int64_t(b.m0) * o.lda;
    const float* bb = s.tb ? o.B.data() + int64_t(b.n0) * o.ldb : o.B.data() + b.n0;
    c.call(s.ta, s.tb, b.m1 - b.m0, b.n1 - b.n0, s.K, 1.f, a, o.lda, bb, o.ldb, 1.f,
           o.C.data() + int64_t(b.m0) * o.ldc + b.n0, o.ldc);
  };
  const auto t0 = std::chrono::steady_clock::now();
  pool.run(body);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Checks C (after one run_split) on 24 rows against a double product.
bool check(const Shape& s, const Operands& o, double* worst) {
  auto a_at = [&](int i, int k) { return double(s.ta ? o.A[int64_t(k) * o.lda + i] : o.A[int64_t(i) * o.lda + k]); };
  auto b_at = [&](int k, int j) { return double(s.tb ? o.B[int64_t(j) * o.ldb + k] : o.B[int64_t(k) * o.ldb + j]); };
  bool ok = true;
  for (int r = 0; r < 24; ++r) {
    const int i = int(int64_t(r) * (s.M - 1) / 23);
    for (int j = 0; j < s.N; ++j) {
      double ref = o.C0[int64_t(i) * s.N + j], mag = std::fabs(ref);
      for (int k = 0; k < s.K; ++k) {
        const double p = a_at(i, k) * b_at(k, j);
        ref += p, mag += std::fabs(p);
      }
      const double err = std::fabs(double(o.C[int64_t(i) * s.N + j]) - ref);
      *worst = std::max(*worst, err / mag);
      if (err > 1e-5 * mag + 1e-30) ok = false;
    }
  }
  return ok;
}

using troupe::bench::median;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 5;
  bool own = true, device = true;
  std::string cases = "tiny,small,gpt2-124m";
  std::string openblas = "libopenblas.so.0", blis = "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4",
              dnnl = "libdnnl.so.2";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sgemm_candidates: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--cases") cases = next();
    else if (a == "--openblas") openblas = next();
    else if (a == "--blis") blis = next();
    else if (a == "--dnnl") dnnl = next();
    else if (a == "--no-own") own = false;
    else if (a == "--no-device") device = false;
    else {
      std::fprintf(stderr, "sgemm_candidates: unknown argument %s (see the header of bench/sgemm_candidates.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  if (threads < 1 || rounds < 1) {
    std::fprintf(stderr, "sgemm_candidates: --threads and --rounds must be at least 1\n");
    return 2;
  }
  // oneDNN's OpenMP runtime reads this when it loads: one thread per participant.
  setenv("OMP_NUM_THREADS", "1", 0);
  std::printf("CPU: %s\n", troupe::kernels::cpu::cpu_features_line().c_str());
  std::vector<Candidate> cands;
  add_openblas(cands, openblas);
  add_blis(cands, blis);
  add_dnnl(cands, dnnl);
  if (own && troupe::kernels::cpu::cpu_has_avx512())
    cands.push_back({"own", "troupe's packed AVX-512 kernel (kernels/cpu/sgemm_avx512.cpp)",
                     [](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                        int ldb, float beta, float* C, int ldc) {
                       troupe::kernels::cpu::sgemm_avx512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                     }});
  if (device) {
    namespace cpu = troupe::kernels::cpu;
    cpu::use_single_threaded_blas();
    const auto k = cpu::gemm_kernel();
    const std::string chosen = k == cpu::GemmKernel::kDnnl        ? "oneDNN, tall TN products as panels"
                               : k == cpu::GemmKernel::kOwnAvx512 ? "the own AVX-512 kernel"
                                                                  : "OpenBLAS";
    cands.push_back({"device", "the CPU device's sgemm_single (" + chosen + ")",
                     [](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                        int ldb, float beta, float* C, int ldc) {
                       troupe::kernels::cpu::sgemm_single(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                     }});
  }
  for (const auto& c : cands) std::printf("candidate %-8s %s\n", c.name.c_str(), c.detail.c_str());
  std::printf("threads %d (one block of C each, the library single-threaded), %d rounds\n", threads, rounds);

  troupe::kernels::cpu::ThreadPool pool(threads);
  std::mt19937 rng(1234);
  for (const std::string& case_name : split_list(cases)) {
    const ModelCase* mc = nullptr;
    for (const auto& c : kCases)
      if (case_name == c.name) mc = &c;
    if (!mc) {
      std::fprintf(stderr, "sgemm_candidates: unknown case %s (tiny, small, gpt2-124m)\n", case_name.c_str());
      return 2;
    }
    const auto shapes = shapes_of(*mc);
    std::vector<Operands> ops;
    for (const auto& s : shapes) ops.push_back(make_operands(s, rng));
    double case_flops = 0;
    for (const auto& s : shapes) case_flops += s.flops();
    std::printf("\n== %s: M(tokens) %d, D %d, Vp %d, %zu GEMMs, %.2f GFLOP\n", mc->name, mc->tokens, mc->width,
                mc->padded_vocab, shapes.size(), case_flops * 1e-9);
    for (auto& c : cands) {
      c.correct = true;
      c.seconds.assign(rounds, std::vector<double>(shapes.size()));
      double worst = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        run_split(c, shapes[i], ops[i], pool);
        if (!check(shapes[i], ops[i], &worst)) {
          std::printf("  %-8s WRONG on %s (%c%c %dx%dx%d): worst |err| / sum|ab| %.2e > 1e-5\n", c.name.c_str(),
                      shapes[i].name.c_str(), shapes[i].ta ? 'T' : 'N', shapes[i].tb ? 'T' : 'N', shapes[i].M,
                      shapes[i].N, shapes[i].K, worst);
          c.correct = false;
          break;
        }
      }
      if (c.correct) std::printf("  %-8s correct on every shape (worst |err| / sum|ab| %.2e)\n", c.name.c_str(), worst);
    }
    for (int r = 0; r < rounds; ++r)
      for (auto& c : cands) {
        if (!c.correct) continue;
        for (size_t i = 0; i < shapes.size(); ++i) {
          run_split(c, shapes[i], ops[i], pool);  // warm-up: packs buffers, pages
          c.seconds[r][i] = run_split(c, shapes[i], ops[i], pool);
        }
      }
    std::printf("  %-22s", "shape (op, M x N x K)");
    for (const auto& c : cands) std::printf(" %10s", c.name.c_str());
    std::printf("   GFLOP/s, median of %d\n", rounds);
    for (size_t i = 0; i < shapes.size(); ++i) {
      char label[64];
      std::snprintf(label, sizeof label, "%s %c%c %dx%dx%d", shapes[i].name.c_str(), shapes[i].ta ? 'T' : 'N',
                    shapes[i].tb ? 'T' : 'N', shapes[i].M, shapes[i].N, shapes[i].K);
      std::printf("  %-34s", label);
      for (const auto& c : cands) {
        if (!c.correct) {
          std::printf(" %10s", "wrong");
          continue;
        }
        std::vector<double> t;
        for (int r = 0; r < rounds; ++r) t.push_back(c.seconds[r][i]);
        std::printf(" %10.1f", shapes[i].flops() / median(t) * 1e-9);
      }
      std::printf("\n");
    }
    std::printf("  %-34s", "whole step's GEMMs");
    for (const auto& c : cands) {
      if (!c.correct) {
        std::printf(" %10s", "wrong");
        continue;
      }
      std::vector<double> t;
      for (int r = 0; r < rounds; ++r) {
        double sum = 0;
        for (double x : c.seconds[r]) sum += x;
        t.push_back(sum);
      }
      std::printf(" %10.1f", case_flops / median(t) * 1e-9);
    }
    std::printf("\n");
  }
  return 0;
}
