#include "kernels/cpu/sgemm_check.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace troupe::kernels::cpu {
namespace {

// Deterministic values in [-1, 1) (a 32-bit LCG), so the check is the same everywhere.
struct Lcg {
  uint32_t s;
  float next() {
    s = s * 1664525u + 1013904223u;
    return float(s >> 8) / float(1u << 23) - 1.0f;
  }
};

}  // namespace

std::string sgemm_check_case(SgemmFn sgemm, bool ta, bool tb, int M, int N, int K, float alpha, float beta,
                             uint32_t seed) {
  Lcg rng{seed};
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
  std::vector<float> A(size_t(ta ? K : M) * lda), B(size_t(tb ? N : K) * ldb), C0(size_t(M) * ldc);
  for (auto& x : A) x = rng.next();
  for (auto& x : B) x = rng.next();
  for (auto& x : C0) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : rng.next();
  std::vector<float> C = C0;
  sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  char what[96];
  std::snprintf(what, sizeof what, "%c%c %dx%dx%d alpha %g beta %g", ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K,
                double(alpha), double(beta));
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const double b = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        ref += a * b, mag += std::fabs(a * b);
      }
      ref *= alpha, mag *= std::fabs(alpha);
      if (beta != 0.f) {
        const double c0 = double(beta) * C0[size_t(i) * ldc + j];
        ref += c0, mag += std::fabs(c0);
      }
      const double c = C[size_t(i) * ldc + j], bound = 1e-5 * mag + 1e-30;
      if (!(std::fabs(c - ref) <= bound)) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s: C[%d,%d] = %.9g, a double product gives %.9g (bound %.2g)", what, i, j, c,
                      ref, bound);
        return buf;
      }
    }
    for (int j = N; j < ldc; ++j) {
      const float was = C0[size_t(i) * ldc + j], now = C[size_t(i) * ldc + j];
      if (!(now == was || (std::isnan(now) && std::isnan(was))))
        return std::string(what) + ": wrote the padding of row " + std::to_string(i);
    }
  }
  return "";
}

std::string sgemm_self_check(SgemmFn sgemm) {
  uint32_t seed = 12345u;
  const int shapes[][3] = {{3, 5, 7}, {37, 45, 70}, {20, 70, 300}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (const auto& ab : {std::pair{1.f, 0.f}, std::pair{0.5f, 1.f}}) {
        std::string e = sgemm_check_case(sgemm, t & 1, t & 2, s[0], s[1], s[2], ab.first, ab.second, seed++);
        if (!e.empty()) return e;
      }
  return "";
}

}  // namespace troupe::kernels::cpu
