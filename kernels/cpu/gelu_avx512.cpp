// GELU spans with 16 lanes (kernels/cpu/gelu.h). Compiled for AVX-512 alone. Every
// function below is vec_math.h's 8-lane one with the same operations in the same
// order (exp8 -> exp16, tanh_of_gelu_arg, gelu8, gelu_grad8), so an element's bits are
// the same in both variants; keep the two in step.
#include <immintrin.h>

#include "kernels/cpu/gelu.h"

// GCC 12's min/max/roundscale/cvtps/slli intrinsics pass _mm512_undefined_ps() as the
// unused merge source, which -Wmaybe-uninitialized reports once inlined (GCC bug 105593,
// fixed in GCC 13): nothing here reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace troupe::kernels::cpu {
namespace {

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// exp8's range reduction and polynomial, 16 lanes.
__m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

__m512 tanh_of_gelu_arg16(__m512 x, __m512* du_dx) {
  const __m512 k0 = _mm512_set1_ps(0.7978845608028654f), k1 = _mm512_set1_ps(0.044715f);
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 u = _mm512_mul_ps(k0, _mm512_fmadd_ps(_mm512_mul_ps(k1, x2), x, x));
  if (du_dx) *du_dx = _mm512_mul_ps(k0, _mm512_fmadd_ps(_mm512_set1_ps(3.0f * 0.044715f), x2, _mm512_set1_ps(1.0f)));
  const __m512 e = exp16(_mm512_add_ps(u, u));
  return _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

__m512 gelu16(__m512 x) {
  const __m512 t = tanh_of_gelu_arg16(x, nullptr);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
}

__m512 gelu_grad16(__m512 x) {
  __m512 du;
  const __m512 t = tanh_of_gelu_arg16(x, &du);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
  return _mm512_fmadd_ps(half, _mm512_add_ps(one, t), _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_mul_ps(sech2, du)));
}

}  // namespace

void gelu_span_avx512(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_backward_span_avx512(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 g = gelu_grad16(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

}  // namespace troupe::kernels::cpu
