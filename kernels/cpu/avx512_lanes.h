// The 16-lane operations of vec_formulas.h (vec_math.h's Avx2Lanes, twice as wide) and
// the lane mask of a tail. Include only from the files compiled for AVX-512
// (kernels/CMakeLists.txt: gelu_avx512.cpp, exp_rows_avx512.cpp, small_gemm_avx512.cpp); everything here is
// inline in an unnamed namespace, so no AVX-512 copy of a function can stand in for
// an AVX2 one at link time.
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12's min/max/roundscale/cvtps/slli intrinsics pass _mm512_undefined_ps() as the
// unused merge source, which -Wmaybe-uninitialized reports once inlined (GCC bug 105593,
// fixed in GCC 13): nothing here reads an uninitialised value. (For the rest of the
// AVX-512 file that includes this.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace troupe::kernels::cpu {
namespace {

inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

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
}  // namespace troupe::kernels::cpu
