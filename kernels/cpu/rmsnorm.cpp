// RMSNorm over the last dimension, forward and backward (Llama's norm: no mean, no
// shift). Partitioned like LayerNorm (kernels.h): rows to one participant each in
// forward and for the input gradient, columns for the weight gradient with rows
// added in order 0..N-1, so the bits do not depend on the thread count.
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

// out[N, C] = x * rstd * weight per row, rstd[N] = 1 / sqrt(mean(x^2) + eps) saved.
void rmsnorm_forward(ThreadPool& pool, float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  pool.parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      // Tail lanes load zeros and add nothing to the sum of squares.
      const float s = 1.0f / std::sqrt(dot(x, x, C) / float(C) + eps);
      const __m256 sv = _mm256_set1_ps(s);
      float* o = out + n * C;
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(load_partial(x + c, C - c), sv);
        store_partial(o + c, _mm256_mul_ps(xhat, load_partial(weight + c, C - c)), C - c);
      }
      rstd[n] = s;
    }
  });
}

// dinp[N, C] += rstd * (dnorm - xhat * mean(dnorm * xhat)), dnorm = dout * weight,
// xhat = x * rstd;  dweight[C] += sum_n dout * xhat.
void rmsnorm_backward(ThreadPool& pool, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  pool.parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      const __m256 sv = _mm256_set1_ps(rstd[n]);
      __m256 acc = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(load_partial(x + c, C - c), sv);
        const __m256 dn = _mm256_mul_ps(load_partial(d + c, C - c), load_partial(weight + c, C - c));
        acc = _mm256_fmadd_ps(dn, xhat, acc);
      }
      const __m256 m = _mm256_set1_ps(hsum8(acc) / float(C));
      float* g = dinp + n * C;
      for (int c = 0; c < C; c += 8) {
        const __m256 xhat = _mm256_mul_ps(load_partial(x + c, C - c), sv);
        const __m256 dn = _mm256_mul_ps(load_partial(d + c, C - c), load_partial(weight + c, C - c));
        const __m256 t = _mm256_fnmadd_ps(xhat, m, dn);  // dn - xhat * m
        store_partial(g + c, _mm256_fmadd_ps(sv, t, load_partial(g + c, C - c)), C - c);
      }
    }
  });
  pool.parallel_for(C, 32, [&](int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; cb += 32) {
      const int64_t w = std::min<int64_t>(32, c1 - cb);
      __m256 aw[4];
      for (int j = 0; j < 4; ++j) aw[j] = _mm256_setzero_ps();
      for (int64_t n = 0; n < N; ++n) {
        const __m256 sv = _mm256_set1_ps(rstd[n]);
        const float* x = inp + n * C + cb;
        const float* d = dout + n * C + cb;
        for (int j = 0; j < 4 && j * 8 < w; ++j) {
          const __m256 xhat = _mm256_mul_ps(load_partial(x + j * 8, w - j * 8), sv);
          aw[j] = _mm256_fmadd_ps(load_partial(d + j * 8, w - j * 8), xhat, aw[j]);
        }
      }
      for (int j = 0; j < 4 && j * 8 < w; ++j) {
        float* gw = dweight + cb + j * 8;
        store_partial(gw, _mm256_add_ps(load_partial(gw, w - j * 8), aw[j]), w - j * 8);
      }
    }
  });
}

}  // namespace troupe::kernels::cpu
