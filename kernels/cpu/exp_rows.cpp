// The exp rows: the AVX2 variants and the dispatch (kernels/cpu/exp_rows.h).
#include "kernels/cpu/exp_rows.h"

#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

MaxSumExp max_sum_exp_avx2(const float* row, int n) {
  const float m = row_max(row, n);
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) {
    __m256 x = exp8(_mm256_sub_ps(load_partial(row + j, n - j), mv));
    if (n - j < 8) x = _mm256_and_ps(x, _mm256_castsi256_ps(tail_mask(n - j)));
    acc = _mm256_add_ps(acc, x);
  }
  return {m, hsum8(acc)};
}

void scaled_exp_avx2(float* d, const float* x, float shift, float w, int n) {
  const __m256 sv = _mm256_set1_ps(shift), wv = _mm256_set1_ps(w);
  for (int j = 0; j < n; j += 8)
    store_partial(d + j, _mm256_mul_ps(wv, exp8(_mm256_sub_ps(load_partial(x + j, n - j), sv))), n - j);
}

void softmax_row_avx2(float* p, const float* s, int n, float scale) {
  const float m = row_max(s, n);
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_mul_ps(_mm256_sub_ps(load_partial(s + i, n - i), mv), sv));
    if (n - i < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - i)));
    acc = _mm256_add_ps(acc, e);
    store_partial(p + i, e, n - i);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum8(acc));
  for (int i = 0; i < n; i += 8) store_partial(p + i, _mm256_mul_ps(load_partial(p + i, n - i), inv), n - i);
}

namespace {
bool wide() {
  static const bool avx512 = active_isa() == Isa::kAvx512;
  return avx512;
}
}  // namespace

MaxSumExp max_sum_exp(const float* row, int n) {
  return wide() ? max_sum_exp_avx512(row, n) : max_sum_exp_avx2(row, n);
}

void scaled_exp(float* d, const float* x, float shift, float w, int n) {
  if (wide()) return scaled_exp_avx512(d, x, shift, w, n);
  scaled_exp_avx2(d, x, shift, w, n);
}

void softmax_row(float* p, const float* s, int n, float scale) {
  if (wide()) return softmax_row_avx512(p, s, n, scale);
  softmax_row_avx2(p, s, n, scale);
}

}  // namespace troupe::kernels::cpu
