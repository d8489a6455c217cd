// AdamW step and the sum of squares behind the global gradient norm.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

namespace {

// AdamW on [lo, hi): the one spelling of the update, which adamw_update and
// adamw_update_norms both call. Its three fused multiply-adds are written out (the ones
// the compiler chose for the loop this replaces, so its numbers stay): left to
// -ffp-contract, which products get fused depends on the code around them, and the two
// callers would not be guaranteed the same bits. Rounded apart: g, c2 * g^2, b1 * m and
// lr * u; fused: m = fma(c1, g, b1 m), v = fma(b2, v, c2 g^2), p = p decay - lr u, and
// decay = 1 - lr wd.
void adamw_range(float* param, const float* grad, float* m, float* v, int64_t lo, int64_t hi, const AdamWArgs& a) {
  const __m256 b1 = _mm256_set1_ps(a.beta1), b2 = _mm256_set1_ps(a.beta2);
  const __m256 c1 = _mm256_set1_ps(1.0f - a.beta1), c2 = _mm256_set1_ps(1.0f - a.beta2);
  const __m256 gs = _mm256_set1_ps(a.grad_scale), lr = _mm256_set1_ps(a.lr);
  const __m256 bc1 = _mm256_set1_ps(a.bias_correction1), bc2 = _mm256_set1_ps(a.bias_correction2);
  const __m256 eps = _mm256_set1_ps(a.eps), decay = _mm256_set1_ps(std::fma(-a.lr, a.weight_decay, 1.0f));
  for (int64_t i = lo; i < hi; i += 8) {
    const int64_t k = hi - i;
    const __m256 g = _mm256_mul_ps(load_partial(grad + i, k), gs);
    const __m256 mi = _mm256_fmadd_ps(c1, g, _mm256_mul_ps(b1, load_partial(m + i, k)));
    const __m256 vi = _mm256_fmadd_ps(b2, load_partial(v + i, k), _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    const __m256 mhat = _mm256_div_ps(mi, bc1);
    const __m256 vhat = _mm256_div_ps(vi, bc2);
    const __m256 u = _mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps));
    const __m256 p = _mm256_fmsub_ps(load_partial(param + i, k), decay, _mm256_mul_ps(lr, u));
    store_partial(m + i, mi, k);
    store_partial(v + i, vi, k);
    store_partial(param + i, p, k);
  }
}

}  // namespace

void adamw_update(ThreadPool& pool, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWArgs& a) {
  // At least 64Ki elements a thread: waking a sleeping worker costs tens of
  // microseconds, as much as updating some 30Ki elements.
  pool.parallel_for(n, 65536, [&](int64_t lo, int64_t hi) { adamw_range(param, grad, m, v, lo, hi, a); });
}

namespace {
constexpr int64_t kSumBlock = int64_t(1) << 16;

double block_sum_squares(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = load_partial(x + i, n - i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  return (t[0] + t[1]) + (t[2] + t[3]);
}
}  // namespace

// Squares are exact in double (a float times a float fits in 53 bits); block sums are
// added in block order, so the result depends on n and x only.
double sum_squares(ThreadPool& pool, Scratch& scratch, const float* x, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (scratch.partials.size() < size_t(blocks)) scratch.partials.resize(size_t(blocks));
  double* part = scratch.partials.data();
  pool.parallel_for(blocks, 2, [&](int64_t b, int64_t e) {  // 128Ki elements a thread at least
    for (int64_t i = b; i < e; ++i) part[i] = block_sum_squares(x + i * kSumBlock, std::min(kSumBlock, n - i * kSumBlock));
  });
  double total = 0;
  for (int64_t i = 0; i < blocks; ++i) total += part[i];
  return total;
}

void adamw_update_norms(ThreadPool& pool, Scratch& scratch, float* param, const float* grad, float* m, float* v,
                        int64_t n, const AdamWArgs& a, double* update_sq, double* weight_sq) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (scratch.update_partials.size() < 2 * size_t(blocks)) scratch.update_partials.resize(2 * size_t(blocks));
  double* part = scratch.update_partials.data();
  // Block by block (64 Ki elements, adamw_update's grain; one a thread at least), in
  // pieces of 4 Ki elements: a piece's weights kept (16 KiB, in L1), updated by
  // adamw_range, then both sums read from cache, in double (the difference of two floats
  // taken in double). The block's accumulators run over its pieces in order.
  constexpr int64_t kPiece = 4096;
  pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    alignas(64) float before[kPiece];
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t lo = blk * kSumBlock, hi = std::min(n, lo + kSumBlock);
      __m256d u0 = _mm256_setzero_pd(), u1 = _mm256_setzero_pd(), w0 = _mm256_setzero_pd(), w1 = _mm256_setzero_pd();
      for (int64_t at = lo; at < hi; at += kPiece) {
        const int64_t len = std::min(kPiece, hi - at);
        std::copy(param + at, param + at + len, before);
        adamw_range(param, grad, m, v, at, at + len, a);
        for (int64_t i = 0; i < len; i += 8) {
          // Lanes past the end load 0 on both sides: they add nothing.
          const __m256 old = load_partial(before + i, len - i), now = load_partial(param + at + i, len - i);
          const __m256d o_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(old));
          const __m256d o_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(old, 1));
          const __m256d d_lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(now)), o_lo);
          const __m256d d_hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(now, 1)), o_hi);
          u0 = _mm256_fmadd_pd(d_lo, d_lo, u0);
          u1 = _mm256_fmadd_pd(d_hi, d_hi, u1);
          w0 = _mm256_fmadd_pd(o_lo, o_lo, w0);
          w1 = _mm256_fmadd_pd(o_hi, o_hi, w1);
        }
      }
      alignas(32) double t[4];
      _mm256_store_pd(t, _mm256_add_pd(u0, u1));
      part[2 * blk] = (t[0] + t[1]) + (t[2] + t[3]);
      _mm256_store_pd(t, _mm256_add_pd(w0, w1));
      part[2 * blk + 1] = (t[0] + t[1]) + (t[2] + t[3]);
    }
  });
  double du = 0, dw = 0;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    du += part[2 * blk];
    dw += part[2 * blk + 1];
  }
  *update_sq = du;
  *weight_sq = dw;
}

}  // namespace troupe::kernels::cpu
