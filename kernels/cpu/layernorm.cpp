// LayerNorm over the last dimension, forward and backward.
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

// out[N, C] = (x - mean) * rstd * weight + bias per row; mean[N], rstd[N] saved.
// Two passes per row (mean, then the centred variance), each with 8 lane sums.
void layernorm_forward(ThreadPool& pool, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, float eps) {
  pool.parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float m = sum(x, C) / float(C);
      const __m256 mv = _mm256_set1_ps(m);
      __m256 acc = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        __m256 d = _mm256_sub_ps(load_partial(x + c, C - c), mv);
        if (C - c < 8) d = _mm256_and_ps(d, _mm256_castsi256_ps(tail_mask(C - c)));
        acc = _mm256_fmadd_ps(d, d, acc);
      }
      const float var = hsum8(acc) / float(C);
      const float s = 1.0f / std::sqrt(var + eps);
      const __m256 sv = _mm256_set1_ps(s);
      float* o = out + n * C;
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load_partial(x + c, C - c), mv), sv);
        store_partial(o + c, _mm256_fmadd_ps(xhat, load_partial(weight + c, C - c), load_partial(bias + c, C - c)), C - c);
      }
      mean[n] = m;
      rstd[n] = s;
    }
  });
}

// dinp[N, C] += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight;
// dweight[C] += sum_n dout * xhat;  dbias[C] += sum_n dout.
void layernorm_backward(ThreadPool& pool, float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
  // Pass 1, rows: the input gradient. Unused tail lanes load zeros, so dnorm is 0 there
  // and the two row sums are unaffected.
  pool.parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const __m256 mv = _mm256_set1_ps(mean[n]), sv = _mm256_set1_ps(rstd[n]);
      __m256 a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load_partial(x + c, C - c), mv), sv);
        const __m256 dn = _mm256_mul_ps(load_partial(d + c, C - c), load_partial(weight + c, C - c));
        a1 = _mm256_add_ps(a1, dn);
        a2 = _mm256_fmadd_ps(dn, xhat, a2);
      }
      const __m256 m1 = _mm256_set1_ps(hsum8(a1) / float(C)), m2 = _mm256_set1_ps(hsum8(a2) / float(C));
      float* g = dinp + n * C;
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load_partial(x + c, C - c), mv), sv);
        const __m256 dn = _mm256_mul_ps(load_partial(d + c, C - c), load_partial(weight + c, C - c));
        const __m256 t = _mm256_sub_ps(_mm256_sub_ps(dn, m1), _mm256_mul_ps(xhat, m2));
        store_partial(g + c, _mm256_fmadd_ps(sv, t, load_partial(g + c, C - c)), C - c);
      }
    }
  });
  // Pass 2, columns: parameter gradients, rows added in order into register sums.
  pool.parallel_for(C, 32, [&](int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; cb += 32) {
      const int64_t w = std::min<int64_t>(32, c1 - cb);
      __m256 aw[4], ab[4];
      for (int j = 0; j < 4; ++j) aw[j] = ab[j] = _mm256_setzero_ps();
      for (int64_t n = 0; n < N; ++n) {
        const __m256 mv = _mm256_set1_ps(mean[n]), sv = _mm256_set1_ps(rstd[n]);
        const float* x = inp + n * C + cb;
        const float* d = dout + n * C + cb;
        for (int j = 0; j < 4 && j * 8 < w; ++j) {
          const __m256 dv = load_partial(d + j * 8, w - j * 8);
          const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(load_partial(x + j * 8, w - j * 8), mv), sv);
          aw[j] = _mm256_fmadd_ps(dv, xhat, aw[j]);
          ab[j] = _mm256_add_ps(ab[j], dv);
        }
      }
      for (int j = 0; j < 4 && j * 8 < w; ++j) {
        float* gw = dweight + cb + j * 8;
        float* gb = dbias + cb + j * 8;
        store_partial(gw, _mm256_add_ps(load_partial(gw, w - j * 8), aw[j]), w - j * 8);
        store_partial(gb, _mm256_add_ps(load_partial(gb, w - j * 8), ab[j]), w - j * 8);
      }
    }
  });
}

}  // namespace troupe::kernels::cpu
