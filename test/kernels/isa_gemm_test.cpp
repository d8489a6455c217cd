// The run-time ISA choice (kernels/cpu/isa.h), the GEMM choice (kernels/cpu/gemm.h),
// troupe's AVX-512 sgemm (kernels/cpu/sgemm_avx512.h: against a double-precision
// product, and bit for bit whatever block of C a call computes; SKIP with a message on
// a CPU without AVX-512) and oneDNN's (kernels/cpu/sgemm_dnnl.h: against the double
// product, deterministic; SKIP with the reason where libdnnl.so.2 does not load).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include <cblas.h>

#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/sgemm_check.h"
#include "kernels/cpu/sgemm_dnnl.h"

using namespace troupe::kernels::cpu;

TEST_CASE("TROUPE_CPU_ISA: auto picks the CPU's best, explicit values are obeyed, bad ones name the variable") {
  CHECK(choose_isa(nullptr, true) == Isa::kAvx512);
  CHECK(choose_isa(nullptr, false) == Isa::kAvx2);
  CHECK(choose_isa("auto", true) == Isa::kAvx512);
  CHECK(choose_isa("avx2", true) == Isa::kAvx2);
  CHECK(choose_isa("avx512", true) == Isa::kAvx512);
  CHECK_THROWS_WITH_AS(choose_isa("avx512", false), doctest::Contains("TROUPE_CPU_ISA=avx512"), std::runtime_error);
  CHECK_THROWS_WITH_AS(choose_isa("sse", true), doctest::Contains("TROUPE_CPU_ISA=\"sse\""), std::runtime_error);
  // This process: whatever the environment says, consistent with the CPU.
  if (!cpu_has_avx512()) CHECK(active_isa() == Isa::kAvx2);
  CHECK(cpu_features_line().find("avx2") != std::string::npos);
}

namespace {

GemmKernel choose(const char* env, Isa isa, const char* core, bool avx512, bool dnnl) {
  GemmChoiceInputs in;
  in.env = env, in.isa = isa, in.openblas_core = core, in.has_avx512 = avx512, in.dnnl_loaded = dnnl;
  in.dnnl_error = dnnl ? "" : "libdnnl.so.2 not loaded (test)";
  return choose_gemm_kernel(in);
}

}  // namespace

TEST_CASE("TROUPE_CPU_GEMM: oneDNN on AVX-512 where it loads; else the own kernel where OpenBLAS runs below an AVX-512 CPU, OpenBLAS otherwise") {
  // oneDNN present and the ISA AVX-512: it runs, whatever OpenBLAS's core.
  CHECK(choose(nullptr, Isa::kAvx512, "Haswell", true, true) == GemmKernel::kDnnl);
  CHECK(choose(nullptr, Isa::kAvx512, "Cooperlake", true, true) == GemmKernel::kDnnl);
  CHECK(choose("auto", Isa::kAvx512, "SkylakeX", true, true) == GemmKernel::kDnnl);
  // On AVX2 (the CPU's, or TROUPE_CPU_ISA=avx2) OpenBLAS, with or without oneDNN.
  CHECK(choose("auto", Isa::kAvx2, "Zen", false, true) == GemmKernel::kOpenBlas);
  CHECK(choose(nullptr, Isa::kAvx2, "Haswell", true, true) == GemmKernel::kOpenBlas);
  // Without it: the rule before oneDNN.
  CHECK(choose(nullptr, Isa::kAvx512, "Haswell", true, false) == GemmKernel::kOwnAvx512);
  CHECK(choose(nullptr, Isa::kAvx512, "SkylakeX", true, false) == GemmKernel::kOpenBlas);
  CHECK(choose(nullptr, Isa::kAvx512, "Cooperlake", true, false) == GemmKernel::kOpenBlas);
  CHECK(choose(nullptr, Isa::kAvx2, "Haswell", true, false) == GemmKernel::kOpenBlas);  // TROUPE_CPU_ISA=avx2
  CHECK(choose(nullptr, Isa::kAvx2, "Zen", false, false) == GemmKernel::kOpenBlas);
  // Asked for by name.
  CHECK(choose("openblas", Isa::kAvx512, "Haswell", true, true) == GemmKernel::kOpenBlas);
  CHECK(choose("own", Isa::kAvx512, "SkylakeX", true, true) == GemmKernel::kOwnAvx512);
  CHECK(choose("dnnl", Isa::kAvx2, "Zen", false, true) == GemmKernel::kDnnl);
  CHECK_THROWS_WITH_AS(choose("own", Isa::kAvx2, "Zen", false, true), doctest::Contains("TROUPE_CPU_GEMM=own"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(choose("dnnl", Isa::kAvx512, "Haswell", true, false),
                       doctest::Contains("TROUPE_CPU_GEMM=dnnl: libdnnl.so.2 not loaded (test)"), std::runtime_error);
  CHECK_THROWS_WITH_AS(choose("mkl", Isa::kAvx2, "Zen", false, true), doctest::Contains("TROUPE_CPU_GEMM=\"mkl\""),
                       std::runtime_error);
  const std::string blas = blas_description();
  CHECK(blas.find("OpenBLAS 0.") == 0);
  CHECK(blas.find(" kernels (") != std::string::npos);
  // This process: the line names the kernel that runs.
  const std::string line = compute_description();
  if (gemm_kernel() == GemmKernel::kDnnl) CHECK(line.find("GEMM oneDNN ") != std::string::npos);
  if (gemm_kernel() == GemmKernel::kOwnAvx512) CHECK(line.find("GEMM troupe's own AVX-512 sgemm") != std::string::npos);
  if (gemm_kernel() == GemmKernel::kOpenBlas) CHECK(line.find("GEMM OpenBLAS ") != std::string::npos);
}

namespace {

struct Problem {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> A, B, C0;
};

Problem make(bool ta, bool tb, int M, int N, int K, float alpha, float beta, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Problem p{ta, tb, M, N, K, 0, 0, 0, alpha, beta, {}, {}, {}};
  // Leading dimensions a little larger than the rows, so strides are exercised.
  p.lda = (ta ? M : K) + 3, p.ldb = (tb ? K : N) + 5, p.ldc = N + 7;
  p.A.resize(size_t(ta ? K : M) * p.lda), p.B.resize(size_t(tb ? N : K) * p.ldb), p.C0.resize(size_t(M) * p.ldc);
  for (auto& x : p.A) x = u(rng);
  for (auto& x : p.B) x = u(rng);
  for (auto& x : p.C0) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);  // beta 0: C not read
  return p;
}

void own_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm_avx512(ta, tb, M, N, K, alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

void run(const Problem& p, std::vector<float>& C, int m0, int m1, int n0, int n1, SgemmFn sgemm = own_sgemm) {
  const float* a = p.ta ? p.A.data() + m0 : p.A.data() + int64_t(m0) * p.lda;
  const float* b = p.tb ? p.B.data() + int64_t(n0) * p.ldb : p.B.data() + n0;
  sgemm(p.ta, p.tb, m1 - m0, n1 - n0, p.K, p.alpha, a, p.lda, b, p.ldb, p.beta, C.data() + int64_t(m0) * p.ldc + n0,
        p.ldc);
}

// Every transpose pair, shapes from below one tile to several blocks, K over one and
// several of the own kernel's 256-runs, alpha, beta 0 (C holds NaN: must not be read),
// 1 and 0.5, padded leading dimensions: each element within the bound the candidates
// benchmark checks every library against (bench/sgemm_candidates.cpp), the padding
// between rows never written (the start-up check's cases, kernels/cpu/sgemm_check.h).
void check_against_double(SgemmFn sgemm, uint32_t seed) {
  // M, N, K: below one tile, not multiples of 12 / 32, K over one and several 256-runs,
  // M over one 192-row block, N over one 1024-column block.
  const int shapes[][3] = {{1, 1, 1}, {5, 17, 3}, {13, 33, 64}, {50, 70, 257}, {200, 45, 600}, {37, 1100, 130}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (const auto& ab : {std::pair{1.f, 1.f}, std::pair{1.f, 0.f}, std::pair{0.125f, 0.5f}})
        CHECK(sgemm_check_case(sgemm, t & 1, t & 2, s[0], s[1], s[2], ab.first, ab.second, seed++) == "");
}

}  // namespace

TEST_CASE("sgemm_avx512 against a double product: every transpose, edges, K across runs, alpha, beta") {
  if (!cpu_has_avx512()) {
    MESSAGE("SKIP: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL");
    return;
  }
  check_against_double(own_sgemm, 7);
}

TEST_CASE("dnnl_sgemm against a double product: every transpose, edges, alpha, beta; the same bits call after call") {
  if (!dnnl_sgemm_loaded()) {
    MESSAGE("SKIP: " << dnnl_load_error());
    return;
  }
  gemm_kernel();  // caps oneDNN's ISA at this process's (kernels/cpu/isa.h) when it is the chosen GEMM
  check_against_double(dnnl_sgemm_single, 9);
  // Deterministic: the same call gives the same bits, also from another thread (each
  // caller runs its calls alone: its OpenMP thread count is set to 1).
  std::mt19937 rng(13);
  const Problem p = make(false, true, 300, 700, 520, 1.f, 1.f, rng);
  std::vector<float> first = p.C0, again = p.C0, other = p.C0;
  run(p, first, 0, p.M, 0, p.N, dnnl_sgemm_single);
  run(p, again, 0, p.M, 0, p.N, dnnl_sgemm_single);
  std::thread([&] { run(p, other, 0, p.M, 0, p.N, dnnl_sgemm_single); }).join();
  CHECK(first == again);
  CHECK(first == other);
  CHECK(dnnl_description().find("oneDNN 2.") == 0);
  // A bad call is an error naming it, not a silent no-op (lda below K for a plain A).
  std::vector<float> C(4, 0.f), A(4, 1.f), B(4, 1.f);
  CHECK_THROWS_WITH_AS(dnnl_sgemm_single(false, false, 2, 2, 2, 1.f, A.data(), 1, B.data(), 2, 0.f, C.data(), 2),
                       doctest::Contains("dnnl_sgemm(NN, M 2, N 2, K 2, lda 1"), std::runtime_error);
}

TEST_CASE("sgemm_avx512: any block of C has the bits of the whole call (thread-count invariance of the device GEMM)") {
  if (!cpu_has_avx512()) {
    MESSAGE("SKIP: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL");
    return;
  }
  std::mt19937 rng(11);
  const int shapes[][3] = {{96, 200, 300}, {300, 64, 520}, {61, 1500, 77}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const Problem p = make(t & 1, t & 2, s[0], s[1], s[2], 1.f, 1.f, rng);
      std::vector<float> whole = p.C0;
      run(p, whole, 0, p.M, 0, p.N);
      // The device's partitions for 2, 3 and 5 participants, and an odd hand-made one.
      for (int parts : {2, 3, 5}) {
        std::vector<float> C = p.C0;
        for (int q = 0; q < parts; ++q) {
          const GemmBlock b = gemm_block(p.M, p.N, q, parts);
          if (b.m0 < b.m1 && b.n0 < b.n1) run(p, C, b.m0, b.m1, b.n0, b.n1);
        }
        INFO("parts " << parts << " M " << p.M << " N " << p.N << " K " << p.K << " ta " << p.ta << " tb " << p.tb);
        CHECK(C == whole);
      }
      std::vector<float> C = p.C0;
      const int mi = p.M / 3 + 1, nj = p.N / 2 + 5;
      run(p, C, 0, mi, 0, nj), run(p, C, mi, p.M, 0, nj), run(p, C, 0, p.M, nj, p.N);
      CHECK(C == whole);
    }
}

namespace {

void openblas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              int(lda), B, int(ldb), beta, C, int(ldc));
}

// Deliberately broken kernels, each a real way a library goes wrong.
void bf16_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {  // products in bf16 (an "fp32" path that is not)
  std::vector<float> a(A, A + size_t(ta ? K : M) * lda), b(B, B + size_t(tb ? N : K) * ldb);
  auto to_bf16 = [](float& x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u &= 0xffff0000u;
    std::memcpy(&x, &u, 4);
  };
  for (auto& x : a) to_bf16(x);
  for (auto& x : b) to_bf16(x);
  openblas_sgemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}
void reads_c_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float, float* C, int64_t ldc) {  // beta 0 treated as 1: reads C
  openblas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, 1.f, C, ldc);
}
void ignores_alpha_sgemm(bool ta, bool tb, int M, int N, int K, float, const float* A, int64_t lda, const float* B,
                         int64_t ldb, float beta, float* C, int64_t ldc) {
  openblas_sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}
void writes_padding_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda,
                          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  openblas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  C[N] = 0.f;  // the first element past row 0
}

}  // namespace

TEST_CASE("sgemm_self_check: the real kernels pass; broken ones are refused with the first failure named") {
  CHECK(sgemm_self_check(openblas_sgemm) == "");
  if (cpu_has_avx512()) CHECK(sgemm_self_check(own_sgemm) == "");
  if (dnnl_sgemm_loaded()) {
    gemm_kernel();  // oneDNN's ISA cap comes first where it is the chosen GEMM
    CHECK(sgemm_self_check(dnnl_sgemm_single) == "");
  } else {
    MESSAGE("oneDNN part skipped: " << dnnl_load_error());
  }
  const std::string bf16 = sgemm_self_check(bf16_sgemm);
  CHECK(bf16.find("NN 3x5x7 alpha 1 beta 0: C[") == 0);
  CHECK(bf16.find("a double product gives") != std::string::npos);
  CHECK(sgemm_self_check(reads_c_sgemm).find("NN 3x5x7 alpha 1 beta 0: C[0,0] = nan") == 0);
  CHECK(sgemm_self_check(ignores_alpha_sgemm).find("NN 3x5x7 alpha 0.5 beta 1: C[0,0] = ") == 0);
  CHECK(sgemm_self_check(writes_padding_sgemm) == "NN 3x5x7 alpha 1 beta 0: wrote the padding of row 0");
  // The process's choice: where oneDNN could have run and did not, the compute line says why.
  if (gemm_kernel() != GemmKernel::kDnnl && active_isa() == Isa::kAvx512 && !std::getenv("TROUPE_CPU_GEMM"))
    CHECK(compute_description().find("; oneDNN not used: ") != std::string::npos);
}
