// Grouped-query attention (Llama): NH query heads share KV key/value heads, query head
// h reading kv head h / G (G = NH / KV), causal within each token's document. The same
// GEMMs-over-the-whole-row scheme as attention.cpp, with k and v read in place from qkv
// (never copied per query head):
//   forward, per (b, h), split over participants:
//     S[T, T] = Q_h K_kv^T;  att[t, :] = softmax(S[t, s0..t] / sqrt(hs)), 0 elsewhere;
//     out[:, h] = att V_kv
//   backward, per (b, kv), split over participants; the participant runs the group's
//   query heads h = kv G .. kv G + G - 1 in order:
//     dP = dO_h V_kv^T;  dS = softmax backward on [s0, t] (0 elsewhere);
//     dQ_h = scale dS K_kv;  dK_kv += scale dS^T Q_h;  dV_kv += P_h^T dO_h
//   (the first head of the group overwrites dK and dV, the others add with beta = 1),
//   so a kv head's gradients sum its query heads in head order whatever the thread count.
// Attention dropout as in attention.cpp: att keeps the undropped probabilities, the
// P V product and dV use the dropped ones, and dP is masked before the softmax backward.
// With KV = NH this is attention.cpp's computation call for call.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/head_loop.h"
#include "kernels/cpu/kernels.h"

namespace troupe::kernels::cpu {
namespace {

// Column offsets and strides of one row's qkv[B, T, (NH + 2 KV) hs].
struct GqaDims {
  int B, T, NH, KV, hs, G;
  int64_t ld;   // floats per token in qkv
  int64_t C;    // NH hs: floats per token in out
  float scale;  // 1 / sqrt(hs)
  GqaDims(int b, int t, int nh, int kv, int h)
      : B(b), T(t), NH(nh), KV(kv), hs(h), G(nh / kv), ld(int64_t(nh + 2 * kv) * h), C(int64_t(nh) * h),
        scale(1.0f / std::sqrt(float(h))) {}
  int64_t q(int h) const { return int64_t(h) * hs; }
  int64_t k(int kv) const { return C + int64_t(kv) * hs; }
  int64_t v(int kv) const { return C + int64_t(KV + kv) * hs; }
};

void check_heads(const char* what, int NH, int KV) {
  if (KV <= 0 || NH % KV != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads do not divide into KV = " + std::to_string(KV) + " groups");
}

}  // namespace

void gqa_attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att, const float* qkv,
                           const int32_t* doc_start, int B, int T, int NH, int KV, int hs, const DropoutMask& drop) {
  check_heads("gqa_attention_forward", NH, KV);
  const GqaDims d(B, T, NH, KV, hs);
  for_each_head(pool, scratch, B, NH, size_t(T) * T, [&](int b, int h, int p) {
    float* S = scratch.per_thread[size_t(p)].data();
    const float* row = qkv + int64_t(b) * T * d.ld;
    const int kv = h / d.G;
    float* a = att + (int64_t(b) * NH + h) * T * T;
    sgemm(false, true, T, T, hs, 1.0f, row + d.q(h), d.ld, row + d.k(kv), d.ld, 0.0f, S, T);
    for (int t = 0; t < T; ++t) {
      const int s0 = doc_start[int64_t(b) * T + t];
      float* arow = a + int64_t(t) * T;
      std::memset(arow, 0, sizeof(float) * size_t(T));
      softmax_row(arow + s0, S + int64_t(t) * T + s0, t - s0 + 1, d.scale);
    }
    // att keeps the undropped probabilities; S is spent and takes the dropped ones.
    const float* P = drop.on() ? dropout_attention_rows(S, a, doc_start + int64_t(b) * T, T, drop, b, h) : a;
    sgemm(false, false, T, hs, T, 1.0f, P, T, row + d.v(kv), d.ld, 0.0f, out + int64_t(b) * T * d.C + d.q(h), d.C);
  });
}

void gqa_attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout, const float* qkv,
                            const float* att, const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                            const DropoutMask& drop) {
  check_heads("gqa_attention_backward", NH, KV);
  const GqaDims d(B, T, NH, KV, hs);
  // With attention dropout the scratch holds dS and the dropped probabilities (as in
  // attention.cpp's backward).
  for_each_head(pool, scratch, B, KV, size_t(drop.on() ? 2 : 1) * T * T, [&](int b, int kv, int p) {
    float* dS = scratch.per_thread[size_t(p)].data();
    float* dropped = dS + int64_t(T) * T;
    const float* row = qkv + int64_t(b) * T * d.ld;
    float* drow = dqkv + int64_t(b) * T * d.ld;
    const float* k = row + d.k(kv);
    const float* v = row + d.v(kv);
    for (int g = 0; g < d.G; ++g) {
      const int h = kv * d.G + g;
      const float* dO = dout + int64_t(b) * T * d.C + d.q(h);
      const float* P = att + (int64_t(b) * NH + h) * T * T;
      const float beta = g == 0 ? 0.0f : 1.0f;
      const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
      sgemm(false, true, T, T, hs, 1.0f, dO, d.C, v, d.ld, 0.0f, dS, T);
      for (int t = 0; t < T; ++t) {
        const int s0 = doc_start[int64_t(b) * T + t];
        float* r = dS + int64_t(t) * T;
        if (drop.on()) {
          dropout_attention_row(r, r, s0, t, T, drop, key, drop.first_slot + b);
          dropout_attention_row(dropped + int64_t(t) * T, P + int64_t(t) * T, s0, t, T, drop, key,
                                drop.first_slot + b);
        }
        softmax_row_backward(r + s0, P + int64_t(t) * T + s0, r + s0, t - s0 + 1);
        if (s0 > 0) std::memset(r, 0, sizeof(float) * size_t(s0));
        if (t + 1 < T) std::memset(r + t + 1, 0, sizeof(float) * size_t(T - t - 1));
      }
      sgemm(false, false, T, hs, T, d.scale, dS, T, k, d.ld, 0.0f, drow + d.q(h), d.ld);
      sgemm(true, false, T, hs, T, d.scale, dS, T, row + d.q(h), d.ld, beta, drow + d.k(kv), d.ld);
      sgemm(true, false, T, hs, T, 1.0f, drop.on() ? dropped : P, T, dO, d.C, beta, drow + d.v(kv), d.ld);
    }
  });
}

}  // namespace troupe::kernels::cpu
