// Token + learned position embedding, forward and backward.
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

// out[N, C] = wte[tokens[n]] + wpe[positions[n]]: one row per token, rows split over threads.
void embedding_forward(ThreadPool& pool, float* out, const int32_t* tokens,
                       const int32_t* positions, const float* wte, const float* wpe, int N,
                       int C) {
  pool.parallel_for(N, 16, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* w = wte + int64_t(tokens[n]) * C;
      const float* p = wpe + int64_t(positions[n]) * C;
      float* o = out + n * C;
      for (int c = 0; c < C; c += 8)
        store_partial(o + c, _mm256_add_ps(load_partial(w + c, C - c), load_partial(p + c, C - c)), C - c);
    }
  });
}

// dwte[tokens[n]] += dout[n]; dwpe[positions[n]] += dout[n]. Several tokens share a row,
// so rows cannot be split over threads without races: threads own column ranges and
// walk the tokens in order 0..N-1, which also fixes the summation order.
void embedding_backward(ThreadPool& pool, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, const int32_t* positions, int N, int C) {
  pool.parallel_for(C, 32, [&](int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0;
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C + c0;
      float* gt = dwte + int64_t(tokens[n]) * C + c0;
      float* gp = dwpe + int64_t(positions[n]) * C + c0;
      for (int64_t c = 0; c < w; c += 8) {
        const __m256 dv = load_partial(d + c, w - c);
        store_partial(gt + c, _mm256_add_ps(load_partial(gt + c, w - c), dv), w - c);
        store_partial(gp + c, _mm256_add_ps(load_partial(gp + c, w - c), dv), w - c);
      }
    }
  });
}

}  // namespace troupe::kernels::cpu
