// AVX2 + FMA helpers shared by the CPU kernels (the build targets x86-64-v3).
//
// exp8 is a vectorised expf (range reduction to r in [-ln2/2, ln2/2] and a degree-6
// polynomial, max error about 2 ulp over the clamped range). Every element of an
// array, including the tail, goes through the same 8-wide code (tails use masked
// loads/stores), so an element's result never depends on where it sits in memory.
// That matters for the document-mask invariance tests and for determinism.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/vec_formulas.h"

namespace troupe::kernels::cpu {

// Lane mask selecting the first n (< 8) lanes, for masked tail loads/stores.
inline __m256i tail_mask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), idx);
}

// The 8-lane operations of vec_formulas.h.
struct Avx2Lanes {
  using Reg = __m256;
  static Reg set(float c) { return _mm256_set1_ps(c); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg pow2(Reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
};

// exp(x) for 8 lanes (vec_formulas.h: clamped to [-87.3, 88.7], about 2 ulp).
inline __m256 exp8(__m256 x) { return formulas::exp<Avx2Lanes>(x); }

// tanh-approximation GELU, its derivative, and the tanh they share, 8 lanes
// (vec_formulas.h).
inline __m256 tanh_of_gelu_arg(__m256 x, __m256* du_dx) { return formulas::tanh_of_gelu_arg<Avx2Lanes>(x, du_dx); }
inline __m256 gelu8(__m256 x) { return formulas::gelu<Avx2Lanes>(x); }
inline __m256 gelu_grad8(__m256 x) { return formulas::gelu_grad<Avx2Lanes>(x); }

// Horizontal sum of 8 lanes in a fixed order.
inline float hsum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_max_ps(lo, hi);
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Loads n floats (n <= 8) with zeros in the unused lanes.
inline __m256 load_partial(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}
inline void store_partial(float* p, __m256 v, int64_t n) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, tail_mask(n), v);
}

// sum_i a[i] * b[i] with 8 lane accumulators, combined in a fixed order.
inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load_partial(a + i, n - i), load_partial(b + i, n - i), acc);
  return hsum8(acc);
}

// sum_i a[i]
inline float sum(const float* a, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_add_ps(acc, load_partial(a + i, n - i));
  return hsum8(acc);
}

// max_i a[i] (-inf for n = 0); the tail's unused lanes never win.
inline float row_max(const float* a, int64_t n) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v = load_partial(a + i, n - i);
    if (n - i < 8) v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, _mm256_castsi256_ps(tail_mask(n - i)));
    mx = _mm256_max_ps(mx, v);
  }
  return hmax8(mx);
}

// y[i] += s * x[i]
inline void axpy(float* y, float s, const float* x, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  for (int64_t i = 0; i < n; i += 8)
    store_partial(y + i, _mm256_fmadd_ps(sv, load_partial(x + i, n - i), load_partial(y + i, n - i)), n - i);
}

}  // namespace troupe::kernels::cpu
