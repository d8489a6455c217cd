#include "kernels/cpu/sgemm_panels.h"

#include <algorithm>
#include <vector>

namespace troupe::kernels::cpu {

bool tall_tn_panels_pay(int M, int N, int K) { return K >= 1024 && M >= 2 * N && N <= 512; }

void sgemm_tn_by_panels(SgemmFn sgemm, int M, int N, int K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> panel;  // [N, rows] of the current run, grown once
  if (panel.size() < size_t(N) * kPanelRows) panel.resize(size_t(N) * kPanelRows);
  for (int r0 = 0; r0 < M; r0 += kPanelRows) {
    const int rows = std::min(kPanelRows, M - r0);
    float* P = panel.data();
    // P[N, rows] = alpha * B^T A[:, r0 : r0 + rows]: TN with M' = N, N' = rows.
    sgemm(true, false, N, rows, K, alpha, B, ldb, A + r0, lda, 0.f, P, rows);
    for (int i = 0; i < rows; ++i) {
      float* c = C + int64_t(r0 + i) * ldc;
      const float* p = P + i;  // column i of P: stride `rows`
      if (beta == 0.f)
        for (int j = 0; j < N; ++j) c[j] = p[int64_t(j) * rows];
      else if (beta == 1.f)
        for (int j = 0; j < N; ++j) c[j] += p[int64_t(j) * rows];
      else
        for (int j = 0; j < N; ++j) c[j] = beta * c[j] + p[int64_t(j) * rows];
    }
  }
}

}  // namespace troupe::kernels::cpu
