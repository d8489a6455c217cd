// kernels/cpu/small_gemm_avx512.h. Compiled for AVX-512 alone.
#include "kernels/cpu/small_gemm_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/avx512_lanes.h"

namespace troupe::kernels::cpu {
namespace {

constexpr int kRows = 6;     // rows of a tile
constexpr int kVectors = 4;  // 16-float vectors of a tile's row: 64 columns

// One tile: rows [0, MR) x vectors [0, NV) of C (the last vector's lanes under `last`).
// The unroll pragmas matter: without them GCC 12 keeps `acc` in memory and stores all of
// it on every k step, which made this 2-3x slower than oneDNN's sgemm.
template <int MR, int NV>
void tile(int K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      bv[v] = v + 1 < NV ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(last, b + 16 * v);
    const float* a = A + k * a_cs;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i * a_rs]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* c = C + i * ldc + 16 * v;
      const __mmask16 m = v + 1 < NV ? __mmask16(0xffff) : last;
      __m512 r;
      if (beta == 0.0f)
        r = _mm512_mul_ps(al, acc[i][v]);
      else if (beta == 1.0f)
        r = _mm512_fmadd_ps(al, acc[i][v], _mm512_maskz_loadu_ps(m, c));
      else
        r = _mm512_fmadd_ps(al, acc[i][v], _mm512_mul_ps(be, _mm512_maskz_loadu_ps(m, c)));
      _mm512_mask_storeu_ps(c, m, r);
    }
}

using TileFn = void (*)(int, float, const float*, int64_t, int64_t, const float*, int64_t, float, float*, int64_t,
                        __mmask16);

template <int MR>
constexpr TileFn tile_of(int nv) {
  return nv == 1 ? tile<MR, 1> : nv == 2 ? tile<MR, 2> : nv == 3 ? tile<MR, 3> : tile<MR, 4>;
}

TileFn tile_fn(int mr, int nv) {
  switch (mr) {
    case 1: return tile_of<1>(nv);
    case 2: return tile_of<2>(nv);
    case 3: return tile_of<3>(nv);
    case 4: return tile_of<4>(nv);
    case 5: return tile_of<5>(nv);
    default: return tile_of<6>(nv);
  }
}

}  // namespace

void small_gemm_avx512(int M, int N, int K, float alpha, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
                       int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int j0 = 0; j0 < N; j0 += 16 * kVectors) {
    const int cols = N - j0 < 16 * kVectors ? N - j0 : 16 * kVectors;
    const int nv = (cols + 15) / 16;
    const __mmask16 last = lanes(cols - 16 * (nv - 1));
    for (int i0 = 0; i0 < M; i0 += kRows) {
      const int mr = M - i0 < kRows ? M - i0 : kRows;
      tile_fn(mr, nv)(K, alpha, A + i0 * a_rs, a_rs, a_cs, B + j0, ldb, beta, C + i0 * ldc + j0, ldc, last);
    }
  }
}

}  // namespace troupe::kernels::cpu
