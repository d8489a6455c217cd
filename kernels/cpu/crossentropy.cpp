// Cross-entropy over the V valid vocabulary columns of padded logits, with a loss mask.
#include <cmath>

#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

// losses[n] = mask[n] * (logsumexp(logits[n, :V]) - logits[n, targets[n]]); lse[n] saved.
// Masked-out rows (padding, cross-document predictions) are skipped: loss 0, lse 0.
void crossentropy_forward(ThreadPool& pool, float* losses, float* lse, const float* logits,
                          const int32_t* targets, const float* mask, int N, int V, int ld) {
  pool.parallel_for(N, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (mask[n] == 0.0f) {
        losses[n] = 0.0f;
        lse[n] = 0.0f;
        continue;
      }
      const float* l = logits + n * ld;
      const auto r = max_sum_exp(l, V);
      const float s = r.max + std::log(r.sum);
      lse[n] = s;
      losses[n] = mask[n] * (s - l[targets[n]]);
    }
  });
}

// dlogits[n, j] = mask[n] * scale * (exp(logits[n, j] - lse[n]) - [vocab_begin + j == targets[n]]),
// j < V; padding columns j >= V are set to 0. The one body of both the whole-vocabulary
// backward (vocab_begin 0: every target lies in the V columns) and a vocabulary shard's
// (cpu/vocab_shard.cpp: a target outside the shard subtracts nothing).
void crossentropy_backward(ThreadPool& pool, float* dlogits, const float* logits,
                           const float* lse, const int32_t* targets, const float* mask,
                           float scale, int N, int V, int ld, int vocab_begin) {
  pool.parallel_for(N, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* l = logits + n * ld;
      float* d = dlogits + n * ld;
      const float w = mask[n] * scale;
      if (w == 0.0f) {
        for (int j = 0; j < ld; j += 8) store_partial(d + j, _mm256_setzero_ps(), ld - j);
        continue;
      }
      scaled_exp(d, l, lse[n], w, V);
      const int64_t t = int64_t(targets[n]) - vocab_begin;
      if (t >= 0 && t < V) d[t] -= w;
      for (int j = V; j < ld; ++j) d[j] = 0.0f;
    }
  });
}

}  // namespace troupe::kernels::cpu
