// Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (kernels/CMakeLists.txt);
// reached only through the CPU device's dispatch when the CPU has them.
#include "kernels/cpu/sgemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace troupe::kernels::cpu {
namespace {

// Register tile kMr x kNr: 12 rows x 2 zmm = 24 accumulators, 2 for B, 1 for A's broadcast.
constexpr int kMr = 12, kNr = 32;
// kKc k's per run (a B micro-panel of kKc x kNr floats is 32 KiB: L1), kMc rows of A per
// block (kMc x kKc floats, 192 KiB: L2), kNc columns of B per block (1 MiB).
constexpr int kKc = 256, kMc = 192, kNc = 1024;
static_assert(kMc % kMr == 0 && kNc % kNr == 0);

struct PackBuffers {
  float* a = nullptr;  // kMc x kKc
  float* b = nullptr;  // kKc x kNc
  PackBuffers() {
    a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMc * kKc));
    b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kKc * kNc));
    if (!a || !b) throw std::bad_alloc();
  }
  ~PackBuffers() {
    std::free(a);
    std::free(b);
  }
  PackBuffers(const PackBuffers&) = delete;
  PackBuffers& operator=(const PackBuffers&) = delete;
};

PackBuffers& buffers() {
  thread_local PackBuffers b;
  return b;
}

// op(A)[i0 + i, p0 + k] for i < mc, k < kc into micro-panels of kMr rows, each k-major
// (kc x kMr); rows past mc are zero.
void pack_a(bool ta, const float* A, int lda, int i0, int mc, int p0, int kc, float* dst) {
  for (int ir = 0; ir < mc; ir += kMr) {
    const int mr = std::min(kMr, mc - ir);
    float* d = dst + int64_t(ir) * kc;
    if (ta) {  // A is [K, M]: a row of op(A)'s column block is contiguous
      for (int k = 0; k < kc; ++k) {
        const float* src = A + int64_t(p0 + k) * lda + i0 + ir;
        std::memcpy(d + k * kMr, src, sizeof(float) * mr);
        for (int r = mr; r < kMr; ++r) d[k * kMr + r] = 0.f;
      }
    } else {  // A is [M, K]: gather one k of the panel's mr rows at a time
      const float* src = A + int64_t(i0 + ir) * lda + p0;
      const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(lda));
      const __mmask16 live = __mmask16((1u << mr) - 1), tile = __mmask16((1u << kMr) - 1);
      for (int k = 0; k < kc; ++k)
        _mm512_mask_storeu_ps(d + k * kMr, tile,
                              _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, rows, src + k, 4));
    }
  }
}

// op(B)[p0 + k, j0 + j] for k < kc, j < nc into micro-panels of kNr columns, each
// k-major (kc x kNr); columns past nc are zero.
void pack_b(bool tb, const float* B, int ldb, int p0, int kc, int j0, int nc, float* dst) {
  for (int jr = 0; jr < nc; jr += kNr) {
    const int nr = std::min(kNr, nc - jr);
    float* d = dst + int64_t(jr) * kc;
    if (!tb) {  // B is [K, N]: rows contiguous
      const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
      const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
      for (int k = 0; k < kc; ++k) {
        const float* src = B + int64_t(p0 + k) * ldb + j0 + jr;
        _mm512_store_ps(d + k * kNr, _mm512_maskz_loadu_ps(m0, src));
        _mm512_store_ps(d + k * kNr + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
    } else {  // B is [N, K]: op(B)'s column j is row j of B; gather one k of 16 rows at a time
      const float* src = B + int64_t(j0 + jr) * ldb + p0;
      const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(ldb));
      const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
      const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
      const float* src1 = nr > 16 ? src + int64_t(16) * ldb : src;  // only read when m1 is set
      for (int k = 0; k < kc; ++k) {
        _mm512_store_ps(d + k * kNr, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, rows, src + k, 4));
        _mm512_store_ps(d + k * kNr + 16,
                        m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, rows, src1 + k, 4) : _mm512_setzero_ps());
      }
    }
  }
}

// The mr x nr corner of C += (or = for beta == 0) the product of one A and one B micro-panel:
// C = alpha * acc + beta * C, acc the k-ordered fused multiply-add chain over kc.
void micro_tile(int kc, const float* a, const float* b, float* c, int ldc, int mr, int nr, float alpha,
                float beta) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNr), b1 = _mm512_load_ps(b + k * kNr + 16);
    const float* ak = a + k * kMr;
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) {
    if (r >= mr) break;
    float* cr = c + int64_t(r) * ldc;
    __m512 t0 = _mm512_mul_ps(va, acc[r][0]), t1 = _mm512_mul_ps(va, acc[r][1]);
    if (beta != 0.f) {
      t0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, cr), t0);
      t1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, cr + 16), t1);
    }
    _mm512_mask_storeu_ps(cr, m0, t0);
    _mm512_mask_storeu_ps(cr + 16, m1, t1);
  }
}

}  // namespace

void sgemm_avx512(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.f) {  // cblas: A and B are not read; C = beta C (0 when beta is 0)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        float& c = C[int64_t(i) * ldc + j];
        c = beta == 0.f ? 0.f : beta * c;
      }
    return;
  }
  PackBuffers& buf = buffers();
  for (int jc = 0; jc < N; jc += kNc) {
    const int nc = std::min(kNc, N - jc);
    for (int pc = 0; pc < K; pc += kKc) {
      const int kc = std::min(kKc, K - pc);
      const float beta_run = pc == 0 ? beta : 1.f;  // later runs add into C
      pack_b(trans_b, B, ldb, pc, kc, jc, nc, buf.b);
      for (int ic = 0; ic < M; ic += kMc) {
        const int mc = std::min(kMc, M - ic);
        pack_a(trans_a, A, lda, ic, mc, pc, kc, buf.a);
        for (int jr = 0; jr < nc; jr += kNr)
          for (int ir = 0; ir < mc; ir += kMr)
            micro_tile(kc, buf.a + int64_t(ir) * kc, buf.b + int64_t(jr) * kc, C + int64_t(ic + ir) * ldc + jc + jr,
                       ldc, std::min(kMr, mc - ir), std::min(kNr, nc - jr), alpha, beta_run);
      }
    }
  }
}

}  // namespace troupe::kernels::cpu
