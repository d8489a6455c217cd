// The tall TN product through panels of C's transpose (kernels/cpu/sgemm_panels.h):
// against a double-precision product (sgemm_check_case's bound, 1e-5 * sum |a b|, and
// its checks that beta 0 never reads C and the padding of C's rows is never written),
// with OpenBLAS as the inner sgemm so that it runs on every machine: M below, at, and
// across the 1024-row panels, N from 1, K short and long, alpha, beta 0 / 1 / 0.5. Then
// the device's sgemm on the process's kernel at shapes the rule sends through panels
// when that kernel is oneDNN: the same bound, and the same bits call after call.
#include <doctest/doctest.h>

#include <cblas.h>

#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/sgemm_check.h"
#include "kernels/cpu/sgemm_panels.h"

using namespace troupe::kernels::cpu;

namespace {

void blas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda, const float* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
              int(lda), B, int(ldb), beta, C, int(ldc));
}

// TN through the panels, every other pair straight to OpenBLAS (sgemm_check_case
// calls the function it is given with its own transposes).
void panels_over_blas(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  REQUIRE((ta && !tb));
  sgemm_tn_by_panels(blas_sgemm, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

TEST_CASE("sgemm_tn_by_panels against a double product: panel edges, alpha, beta, padding") {
  use_single_threaded_blas();
  const int shapes[][3] = {{1, 1, 3}, {1023, 19, 40}, {1024, 64, 1100}, {1025, 7, 1024}, {2100, 64, 1100}, {3000, 1, 5}};
  uint32_t seed = 21;
  for (const auto& s : shapes)
    for (const auto& ab : {std::pair{1.f, 1.f}, std::pair{1.f, 0.f}, std::pair{0.125f, 0.5f}}) {
      CAPTURE(s[0]);
      CAPTURE(s[1]);
      CAPTURE(s[2]);
      CHECK(sgemm_check_case(panels_over_blas, true, false, s[0], s[1], s[2], ab.first, ab.second, seed++) == "");
    }
}

TEST_CASE("tall_tn_panels_pay: long K, C at least twice as tall as wide, N at most 512") {
  CHECK(tall_tn_panels_pay(4096, 256, 1024));  // small's head dW
  CHECK(tall_tn_panels_pay(1024, 256, 1024));  // small's mlp.c_proj dW
  CHECK_FALSE(tall_tn_panels_pay(50304, 768, 256));  // gpt2-124m's head dW: short K, wide N
  CHECK_FALSE(tall_tn_panels_pay(3072, 768, 4096));  // N above 512
  CHECK_FALSE(tall_tn_panels_pay(256, 1024, 1024));  // wide C
  CHECK_FALSE(tall_tn_panels_pay(4096, 256, 1023));
}

TEST_CASE("the device's sgemm at tall TN shapes (panels when the kernel is oneDNN): a double product's bound, the same bits twice") {
  use_single_threaded_blas();
  MESSAGE("GEMM kernel of this process: " << (gemm_kernel() == GemmKernel::kDnnl       ? "oneDNN (panels)"
                                              : gemm_kernel() == GemmKernel::kOwnAvx512 ? "own AVX-512"
                                                                                          : "OpenBLAS"));
  CHECK(sgemm_check_case(sgemm_single, true, false, 2100, 64, 1100, 1.f, 1.f, 5) == "");
  CHECK(sgemm_check_case(sgemm_single, true, false, 1030, 256, 1024, 1.f, 0.f, 6) == "");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int M = 2048, N = 256, K = 1024;
  std::vector<float> A(size_t(K) * M), B(size_t(K) * N), C0(size_t(M) * N);
  for (auto& x : A) x = u(rng);
  for (auto& x : B) x = u(rng);
  for (auto& x : C0) x = u(rng);
  auto first = C0, again = C0;
  sgemm_single(true, false, M, N, K, 1.f, A.data(), M, B.data(), N, 1.f, first.data(), N);
  sgemm_single(true, false, M, N, K, 1.f, A.data(), M, B.data(), N, 1.f, again.data(), N);
  CHECK(first == again);
}
