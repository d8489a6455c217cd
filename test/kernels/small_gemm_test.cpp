// The attention's small AVX-512 GEMM (kernels/cpu/small_gemm_avx512.h) against a double
// product: A and A^T, beta 0 / 1 / 0.5, alpha 1 and 0.125, shapes around its tile (6 rows
// x 64 columns, 16-lane vectors) and its use (K, N up to 256), a padded C whose padding it
// must not write, beta = 0 never reading C (NaN there), and its order claim: the same
// bits whether C is computed at once or in pieces cut across the tiles. SKIP with a
// message on a CPU without AVX-512.
//
// Bound, fixed before the first run: |c - ref| <= (K + 2) 2^-24 (sum_k |alpha a b| +
// |beta c0|), the worst-case rounding of a K-term fused multiply-add chain and the
// final scaling.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/small_gemm_avx512.h"
#include "test/support/randn.h"

using troupe::kernels::cpu::cpu_has_avx512;
using troupe::kernels::cpu::small_gemm_avx512;
using troupe::testing::randn;

namespace {

struct Shape {
  int M, N, K;
};

}  // namespace

TEST_CASE("small_gemm_avx512 matches a double product around its tiles, leaves C's padding, and cuts give the same bits") {
  if (!cpu_has_avx512()) {
    MESSAGE("SKIP: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL");
    return;
  }
  const Shape shapes[] = {{1, 1, 1},    {5, 17, 3},    {6, 64, 64},   {7, 65, 128}, {13, 130, 33},
                          {32, 128, 64}, {64, 16, 64}, {31, 200, 256}, {12, 48, 1}};
  for (const Shape& s : shapes)
    for (bool ta : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (float alpha : {1.0f, 0.125f}) {
          CAPTURE(s.M);
          CAPTURE(s.N);
          CAPTURE(s.K);
          CAPTURE(ta);
          CAPTURE(beta);
          CAPTURE(alpha);
          const int lda = (ta ? s.M : s.K) + 3, ldb = s.N + 5, ldc = s.N + 7;  // padded rows
          const auto A = randn(size_t(ta ? s.K : s.M) * lda, 11);
          const auto B = randn(size_t(s.K) * ldb, 12);
          const auto C0 = randn(size_t(s.M) * ldc, 13);
          const int64_t a_rs = ta ? 1 : lda, a_cs = ta ? lda : 1;
          std::vector<float> C = C0;
          if (beta == 0.0f)
            for (int i = 0; i < s.M; ++i)
              for (int j = 0; j < s.N; ++j) C[size_t(i) * ldc + j] = NAN;  // never read
          small_gemm_avx512(s.M, s.N, s.K, alpha, A.data(), a_rs, a_cs, B.data(), ldb, beta, C.data(), ldc);
          int bad = 0, padding_written = 0;
          for (int i = 0; i < s.M; ++i) {
            for (int j = 0; j < s.N; ++j) {
              double ref = 0, mag = 0;
              for (int k = 0; k < s.K; ++k) {
                const double t = double(alpha) * A[size_t(i * a_rs + k * a_cs)] * B[size_t(k) * ldb + j];
                ref += t;
                mag += std::fabs(t);
              }
              const double c0 = beta == 0.0f ? 0.0 : double(beta) * C0[size_t(i) * ldc + j];
              ref += c0;
              mag += std::fabs(c0);
              const double got = C[size_t(i) * ldc + j];
              bad += !(std::fabs(got - ref) <= (s.K + 2) * std::ldexp(1.0, -24) * mag);
            }
            for (int j = s.N; j < ldc; ++j) padding_written += C[size_t(i) * ldc + j] != C0[size_t(i) * ldc + j];
          }
          CHECK(bad == 0);
          CHECK(padding_written == 0);

          // The same C from four pieces: rows cut at 5 (inside a 6-row tile), columns at
          // 16 (inside a 64-column tile).
          if (s.M > 5 && s.N > 16) {
            std::vector<float> P = C0;
            for (int r0 : {0, 5})
              for (int c0 : {0, 16}) {
                const int m = r0 ? s.M - 5 : 5, n = c0 ? s.N - 16 : 16;
                small_gemm_avx512(m, n, s.K, alpha, A.data() + r0 * a_rs, a_rs, a_cs, B.data() + c0, ldb, beta,
                                  P.data() + size_t(r0) * ldc + c0, ldc);
              }
            std::vector<float> W = C0;
            small_gemm_avx512(s.M, s.N, s.K, alpha, A.data(), a_rs, a_cs, B.data(), ldb, beta, W.data(), ldc);
            CHECK(std::memcmp(P.data(), W.data(), P.size() * sizeof(float)) == 0);
          }
        }
}
