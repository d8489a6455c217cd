// Causal self-attention with a per-document mask, and the row softmax it uses.
#include <cmath>
#include <cstring>

#include "kernels/cpu/head_loop.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

void softmax_row(float* p, const float* s, int n, float scale) {
  const float m = row_max(s, n);
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_mul_ps(_mm256_sub_ps(load_partial(s + i, n - i), mv), sv));
    if (n - i < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - i)));
    acc = _mm256_add_ps(acc, e);
    store_partial(p + i, e, n - i);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum8(acc));
  for (int i = 0; i < n; i += 8) store_partial(p + i, _mm256_mul_ps(load_partial(p + i, n - i), inv), n - i);
}

void softmax_row_backward(float* ds, const float* p, const float* dp, int n) {
  const __m256 s = _mm256_set1_ps(dot(p, dp, n));
  for (int i = 0; i < n; i += 8)
    store_partial(ds + i, _mm256_mul_ps(load_partial(p + i, n - i), _mm256_sub_ps(load_partial(dp + i, n - i), s)), n - i);
}

namespace {

struct Dims {
  int B, T, C, NH, hs;
  int64_t C3;
  float scale;
  Dims(int b, int t, int c, int nh) : B(b), T(t), C(c), NH(nh), hs(c / nh), C3(3 * int64_t(c)), scale(1.0f / std::sqrt(float(c / nh))) {}
};

}  // namespace

// Per (b, h), as GEMMs over the whole row (the causal and document mask is applied
// to the scores, so masked pairs cost flops but keep the GEMMs large):
//   S[T, T] = Q K^T;  att[t, :] = softmax(S[t, s0..t] / sqrt(hs)), 0 outside [s0, t];
//   out[T, hs] = att V.   Q, K, V are column blocks of qkv (row stride 3C).
// With attention dropout, att keeps the undropped probabilities (the softmax backward
// needs them) and out = dropout(att) V, the dropped rows written over S.
void attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att,
                       const float* qkv, const int32_t* doc_start, int B, int T, int C, int NH,
                       const DropoutMask& drop) {
  const Dims d(B, T, C, NH);
  for_each_head(pool, scratch, B, NH, size_t(2) * T * T, [&](int b, int h, int p) {
    float* S = scratch.per_thread[size_t(p)].data();
    const float* q = qkv + int64_t(b) * T * d.C3 + int64_t(h) * d.hs;
    float* a = att + (int64_t(b) * NH + h) * T * T;
    sgemm(false, true, T, T, d.hs, 1.0f, q, d.C3, q + C, d.C3, 0.0f, S, T);
    for (int t = 0; t < T; ++t) {
      const int s0 = doc_start[int64_t(b) * T + t];
      float* row = a + int64_t(t) * T;
      std::memset(row, 0, sizeof(float) * size_t(T));
      softmax_row(row + s0, S + int64_t(t) * T + s0, t - s0 + 1, d.scale);
    }
    // S is spent: with dropout it takes the dropped probabilities.
    const float* P = drop.on() ? dropout_attention_rows(S, a, doc_start + int64_t(b) * T, T, drop, b, h) : a;
    sgemm(false, false, T, d.hs, T, 1.0f, P, T, q + 2 * int64_t(C), d.C3, 0.0f,
          out + int64_t(b) * T * C + int64_t(h) * d.hs, C);
  });
}

// Backward of the above, per (b, h), with P = att (zero outside the mask):
//   dP = dO V^T;  dS = softmax backward of dP on [s0, t] (0 elsewhere);
//   dQ = scale dS K;  dK = scale dS^T Q;  dV = P^T dO   (each overwrites its block of dqkv).
// With attention dropout (mask M, scale s): dP = s M dP~ for dP~ = dO V^T, and
// dV = (s M P)^T dO, the dropped probabilities drawn again into the second half of
// the scratch.
void attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout,
                        const float* qkv, const float* att, const int32_t* doc_start, int B,
                        int T, int C, int NH, const DropoutMask& drop) {
  const Dims d(B, T, C, NH);
  for_each_head(pool, scratch, B, NH, size_t(2) * T * T, [&](int b, int h, int p) {
    float* dS = scratch.per_thread[size_t(p)].data();
    float* dropped = dS + int64_t(T) * T;
    const int64_t hoff = int64_t(h) * d.hs;
    const float* q = qkv + int64_t(b) * T * d.C3 + hoff;
    const float* dO = dout + int64_t(b) * T * C + hoff;
    const float* P = att + (int64_t(b) * NH + h) * T * T;
    float* dq = dqkv + int64_t(b) * T * d.C3 + hoff;
    const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
    sgemm(false, true, T, T, d.hs, 1.0f, dO, C, q + 2 * int64_t(C), d.C3, 0.0f, dS, T);
    for (int t = 0; t < T; ++t) {
      const int s0 = doc_start[int64_t(b) * T + t];
      float* row = dS + int64_t(t) * T;
      if (drop.on()) {
        dropout_attention_row(row, row, s0, t, T, drop, key, drop.first_slot + b);
        dropout_attention_row(dropped + int64_t(t) * T, P + int64_t(t) * T, s0, t, T, drop, key, drop.first_slot + b);
      }
      softmax_row_backward(row + s0, P + int64_t(t) * T + s0, row + s0, t - s0 + 1);
      if (s0 > 0) std::memset(row, 0, sizeof(float) * size_t(s0));
      if (t + 1 < T) std::memset(row + t + 1, 0, sizeof(float) * size_t(T - t - 1));
    }
    sgemm(false, false, T, d.hs, T, d.scale, dS, T, q + C, d.C3, 0.0f, dq, d.C3);
    sgemm(true, false, T, d.hs, T, d.scale, dS, T, q, d.C3, 0.0f, dq + C, d.C3);
    sgemm(true, false, T, d.hs, T, 1.0f, drop.on() ? dropped : P, T, dO, C, 0.0f, dq + 2 * int64_t(C), d.C3);
  });
}

}  // namespace troupe::kernels::cpu
