// The exp rows with 16 lanes (kernels/cpu/exp_rows.h). Compiled for AVX-512 alone. The
// exps run 16 lanes wide; the max and the sums keep the AVX2 variant's 8-lane
// accumulator and order (a vector's low half, then its high half), so both variants
// give the same bits.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/vec_formulas.h"

namespace troupe::kernels::cpu {
namespace {

__m512 exp16(__m512 x) { return formulas::exp<Avx512Lanes>(x); }

// vec_math.h's hsum8 and hmax8 (copied: that header's inline functions must not be
// compiled for AVX-512, or the linker could keep this file's copy for the AVX2 callers).
float sum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
float max8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_max_ps(lo, hi);
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256 low(__m512 v) { return _mm512_castps512_ps256(v); }
__m256 high(__m512 v) { return _mm512_extractf32x8_ps(v, 1); }

// vec_math.h's row_max: the unused lanes of a tail read -inf.
float row_max16(const float* a, int n) {
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m512 v = _mm512_mask_loadu_ps(minus_inf, k, a + i);
    mx = _mm256_max_ps(mx, low(v));
    if (n - i > 8) mx = _mm256_max_ps(mx, high(v));
  }
  return max8(mx);
}

// acc + (the first min(16, left) lanes of e, as 8-lane chunks in order; e is 0 past them).
__m256 add_chunks(__m256 acc, __m512 e, int left) {
  acc = _mm256_add_ps(acc, low(e));
  return left > 8 ? _mm256_add_ps(acc, high(e)) : acc;
}

}  // namespace

MaxSumExp max_sum_exp_avx512(const float* row, int n) {
  const float m = row_max16(row, n);
  const __m512 mv = _mm512_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 k = lanes(n - j);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), mv)));
    acc = add_chunks(acc, e, n - j);
  }
  return {m, sum8(acc)};
}

void scaled_exp_avx512(float* d, const float* x, float shift, float w, int n) {
  const __m512 sv = _mm512_set1_ps(shift), wv = _mm512_set1_ps(w);
  for (int j = 0; j < n; j += 16) {
    const __mmask16 k = lanes(n - j);
    _mm512_mask_storeu_ps(d + j, k, _mm512_mul_ps(wv, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), sv))));
  }
}

void softmax_row_avx512(float* p, const float* s, int n, float scale) {
  const float m = row_max16(s, n);
  const __m512 mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv), sv);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(x));
    acc = add_chunks(acc, e, n - i);
    _mm512_mask_storeu_ps(p + i, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / sum8(acc));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    _mm512_mask_storeu_ps(p + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), inv));
  }
}

}  // namespace troupe::kernels::cpu
