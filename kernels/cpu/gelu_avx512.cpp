// GELU spans with 16 lanes (kernels/cpu/gelu.h). Compiled for AVX-512 alone. The
// formulas are vec_formulas.h's, the ones vec_math.h's gelu8 / gelu_grad8 run on 8
// lanes, so an element's bits are the same in both variants.
#include <immintrin.h>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/vec_formulas.h"

// GCC 12's min/max/roundscale/cvtps/slli intrinsics pass _mm512_undefined_ps() as the
// unused merge source, which -Wmaybe-uninitialized reports once inlined (GCC bug 105593,
// fixed in GCC 13): nothing here reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace troupe::kernels::cpu {
namespace {

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// The 16-lane operations of vec_formulas.h (vec_math.h's Avx2Lanes, twice as wide).
struct Avx512Lanes {
  using Reg = __m512;
  static Reg set(float c) { return _mm512_set1_ps(c); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg pow2(Reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
};

}  // namespace

void gelu_span_avx512(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, formulas::gelu<Avx512Lanes>(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_backward_span_avx512(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 g = formulas::gelu_grad<Avx512Lanes>(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

}  // namespace troupe::kernels::cpu
