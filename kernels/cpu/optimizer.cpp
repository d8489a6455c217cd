// AdamW step and the sum of squares behind the global gradient norm.
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

void adamw_update(ThreadPool& pool, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWArgs& a) {
  const __m256 b1 = _mm256_set1_ps(a.beta1), b2 = _mm256_set1_ps(a.beta2);
  const __m256 c1 = _mm256_set1_ps(1.0f - a.beta1), c2 = _mm256_set1_ps(1.0f - a.beta2);
  const __m256 gs = _mm256_set1_ps(a.grad_scale), lr = _mm256_set1_ps(a.lr);
  const __m256 bc1 = _mm256_set1_ps(a.bias_correction1), bc2 = _mm256_set1_ps(a.bias_correction2);
  const __m256 eps = _mm256_set1_ps(a.eps), decay = _mm256_set1_ps(1.0f - a.lr * a.weight_decay);
  // At least 64Ki elements a thread: waking a sleeping worker costs tens of
  // microseconds, as much as updating some 30Ki elements.
  pool.parallel_for(n, 65536, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i += 8) {
      const int64_t k = hi - i;
      const __m256 g = _mm256_mul_ps(load_partial(grad + i, k), gs);
      const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, load_partial(m + i, k)), _mm256_mul_ps(c1, g));
      const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, load_partial(v + i, k)), _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
      const __m256 mhat = _mm256_div_ps(mi, bc1);
      const __m256 vhat = _mm256_div_ps(vi, bc2);
      const __m256 u = _mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps));
      const __m256 p = _mm256_sub_ps(_mm256_mul_ps(load_partial(param + i, k), decay), _mm256_mul_ps(lr, u));
      store_partial(m + i, mi, k);
      store_partial(v + i, vi, k);
      store_partial(param + i, p, k);
    }
  });
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

}  // namespace troupe::kernels::cpu
