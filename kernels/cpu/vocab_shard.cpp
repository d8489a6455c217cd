// Vocabulary-parallel pieces (tensor parallelism): the token embedding and the
// cross-entropy of the tied head when a rank holds a contiguous range of the
// vocabulary. Shapes and semantics: kernels/device.h. Partitioning as everywhere in
// cpu/kernels.h: rows to one participant each (forward, partials, combine,
// backward); the embedding gradient by columns, tokens added in order 0..N-1. A shard's
// cross-entropy backward is cpu/crossentropy.cpp's, given the shard's vocab_begin.
#include <cmath>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {
namespace {

bool in_range(int32_t token, int begin, int rows) { return token >= begin && token - begin < rows; }

}  // namespace

void embedding_forward_shard(ThreadPool& pool, float* out, const int32_t* tokens, const int32_t* positions,
                             const float* wte, const float* wpe, int N, int C, int vocab_begin, int vocab_rows) {
  pool.parallel_for(N, 16, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* w = in_range(tokens[n], vocab_begin, vocab_rows) ? wte + int64_t(tokens[n] - vocab_begin) * C
                                                                   : nullptr;
      const float* p = wpe ? wpe + int64_t(positions[n]) * C : nullptr;
      float* o = out + n * C;
      for (int c = 0; c < C; c += 8) {
        __m256 v = w ? load_partial(w + c, C - c) : _mm256_setzero_ps();
        if (p) v = w ? _mm256_add_ps(v, load_partial(p + c, C - c)) : load_partial(p + c, C - c);
        store_partial(o + c, v, C - c);
      }
    }
  });
}

void embedding_backward_shard(ThreadPool& pool, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                              const int32_t* positions, int N, int C, int vocab_begin, int vocab_rows) {
  pool.parallel_for(C, 32, [&](int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0;
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C + c0;
      float* gt = in_range(tokens[n], vocab_begin, vocab_rows) ? dwte + int64_t(tokens[n] - vocab_begin) * C + c0
                                                              : nullptr;
      float* gp = dwpe ? dwpe + int64_t(positions[n]) * C + c0 : nullptr;
      for (int64_t c = 0; c < w; c += 8) {
        const __m256 dv = load_partial(d + c, w - c);
        if (gt) store_partial(gt + c, _mm256_add_ps(load_partial(gt + c, w - c), dv), w - c);
        if (gp) store_partial(gp + c, _mm256_add_ps(load_partial(gp + c, w - c), dv), w - c);
      }
    }
  });
}

// The max and the sum of exps are crossentropy_forward's (max_sum_exp), so that one
// shard combined reproduces it bit for bit.
void crossentropy_partials(ThreadPool& pool, float* partials, const float* logits, const int32_t* targets,
                           const float* mask, int N, int V, int ld, int vocab_begin) {
  float* pmax = partials;
  float* psum = partials + N;
  float* ptarget = partials + 2 * int64_t(N);
  pool.parallel_for(N, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (mask[n] == 0.0f) {
        pmax[n] = psum[n] = ptarget[n] = 0.0f;
        continue;
      }
      const float* l = logits + n * ld;
      const auto r = max_sum_exp(l, V);
      pmax[n] = r.max;
      psum[n] = r.sum;
      const int64_t t = int64_t(targets[n]) - vocab_begin;
      ptarget[n] = t >= 0 && t < V ? l[t] : 0.0f;
    }
  });
}

// Shards in shard order: the result is the same on every rank that combines the
// same gathered partials.
void crossentropy_combine(ThreadPool& pool, float* losses, float* lse, const float* partials, int S,
                          const float* mask, int N) {
  pool.parallel_for(N, 64, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (mask[n] == 0.0f) {
        losses[n] = lse[n] = 0.0f;
        continue;
      }
      float M = -INFINITY;
      for (int s = 0; s < S; ++s) M = std::fmax(M, partials[int64_t(s) * 3 * N + n]);
      float sum = 0.0f, target = 0.0f;
      for (int s = 0; s < S; ++s) {
        const float* p = partials + int64_t(s) * 3 * N;
        // exp(0) is exactly 1: a single shard's sum passes through unchanged.
        const float w = p[n] == M ? 1.0f : std::exp(p[n] - M);
        sum += p[N + n] * w;
        target += p[2 * int64_t(N) + n];
      }
      const float l = M + std::log(sum);
      lse[n] = l;
      losses[n] = mask[n] * (l - target);
    }
  });
}

void CpuDevice::embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions,
                                        const float* wte, const float* wpe, int N, int C, int vocab_begin,
                                        int vocab_rows) {
  cpu::embedding_forward_shard(pool_, out, tokens, positions, wte, wpe, N, C, vocab_begin, vocab_rows);
}
void CpuDevice::embedding_backward_shard(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                         const int32_t* positions, int N, int C, int vocab_begin, int vocab_rows) {
  cpu::embedding_backward_shard(pool_, dwte, dwpe, dout, tokens, positions, N, C, vocab_begin, vocab_rows);
}
void CpuDevice::crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                                      const float* mask, int N, int V, int ld, int vocab_begin) {
  cpu::crossentropy_partials(pool_, partials, logits, targets, mask, N, V, ld, vocab_begin);
}
void CpuDevice::crossentropy_combine(float* losses, float* lse, const float* partials, int S, const float* mask,
                                     int N) {
  cpu::crossentropy_combine(pool_, losses, lse, partials, S, mask, N);
}
void CpuDevice::crossentropy_backward_shard(float* dlogits, const float* logits, const float* lse,
                                            const int32_t* targets, const float* mask, float scale, int N, int V,
                                            int ld, int vocab_begin) {
  cpu::crossentropy_backward(pool_, dlogits, logits, lse, targets, mask, scale, N, V, ld, vocab_begin);
}

}  // namespace troupe::kernels::cpu
