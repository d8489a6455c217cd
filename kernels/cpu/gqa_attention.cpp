// Grouped-query attention (Llama), and multi-head attention as its KV = NH case
// (attention.cpp): NH query heads share KV key/value heads, query head h reading kv
// head h / G (G = NH / KV), causal within each token's document. k and v are read in
// place from qkv (never copied per query head).
//
// Per (b, h), the rows are cut into causal blocks (causal_blocks.h): query rows
// [r0, r1) attend to key columns [c0, r1) only, c0 the earliest document start among
// them, so the pairs above the diagonal blocks cost no flops. With S, P = att and the
// scratch all [T, T] (row stride T), only those rectangles are computed:
//   forward, per (b, h), split over participants; per row block:
//     S[r0:r1, c0:r1] = Q_h[r0:r1] K_kv[c0:r1]^T;
//     att[t, :] = softmax(S[t, s0..t] / sqrt(hs)), 0 elsewhere;
//     out[r0:r1, h] = att[r0:r1, c0:r1] V_kv[c0:r1]
//   backward, per (b, kv), split over participants; the participant runs the group's
//   query heads h = kv G .. kv G + G - 1 in order; per row block:
//     dP[r0:r1, c0:r1] = dO_h[r0:r1] V_kv[c0:r1]^T;  dS = softmax backward on [s0, t],
//     0 on the rest of [0, r1);  dQ_h[r0:r1] = scale dS[r0:r1, c0:r1] K_kv[c0:r1]
//   then per column block [k0, k1) (the rows that can see it: [k0, e), causal_blocks.h):
//     dK_kv[k0:k1] += scale dS[k0:e, k0:k1]^T Q_h[k0:e];  dV_kv[k0:k1] += P_h[k0:e, k0:k1]^T dO_h[k0:e]
//   (the first head of the group overwrites dK and dV, the others add with beta = 1),
//   so a kv head's gradients sum its query heads in head order whatever the thread count.
// The products that need K^T or V^T (S, dP) read a copy transposed once per kv head a
// participant meets, so every product is op(A) B with B row-major (head_loop.h's
// head_product). Each product's length is fixed by T and the document starts alone, so
// the bits are too (for a given GEMM kernel).
// Attention dropout: att keeps the undropped probabilities (the softmax backward needs
// them); the P V product and dV use the dropped ones, written over S in the forward and
// into the backward's scratch after V^T, and dP is masked before the softmax backward.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/causal_blocks.h"
#include "kernels/cpu/exp_rows.h"
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
  int block;    // rows of a causal block (causal_blocks.h)
  bool small;   // the products through the small AVX-512 kernel (head_loop.h)
  GqaDims(int b, int t, int nh, int kv, int h, const AttentionPlan& plan)
      : B(b), T(t), NH(nh), KV(kv), hs(h), G(nh / kv), ld(int64_t(nh + 2 * kv) * h), C(int64_t(nh) * h),
        scale(1.0f / std::sqrt(float(h))), block(plan.block > 0 ? plan.block : causal_block(h)),
        small(!plan.process_gemm && small_products()) {}
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
                           const int32_t* doc_start, int B, int T, int NH, int KV, int hs, const DropoutMask& drop,
                           const AttentionPlan& plan) {
  check_heads("gqa_attention_forward", NH, KV);
  const GqaDims d(B, T, NH, KV, hs, plan);
  // Scratch: S [T, T], then K^T [hs, T]. A participant's pairs are consecutive, so the G
  // query heads of a kv head follow each other: K^T is copied when (b, kv) changes.
  std::vector<int64_t> kt_of(size_t(pool.size()), -1);  // the (b, kv) each one's K^T holds
  for_each_head(pool, scratch, B, NH, size_t(T) * T + size_t(hs) * T, [&](int b, int h, int p) {
    float* S = scratch.per_thread[size_t(p)].data();
    float* kt = S + int64_t(T) * T;
    const float* row = qkv + int64_t(b) * T * d.ld;
    const int32_t* starts = doc_start + int64_t(b) * T;
    const int kv = h / d.G;
    float* a = att + (int64_t(b) * NH + h) * T * T;
    const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
    if (kt_of[size_t(p)] != int64_t(b) * KV + kv) {
      transpose_head(kt, row + d.k(kv), T, hs, d.ld);
      kt_of[size_t(p)] = int64_t(b) * KV + kv;
    }
    for_each_row_block(starts, T, d.block, [&](int r0, int r1, int c0) {
      head_product(d.small, false, r1 - r0, r1 - c0, hs, 1.0f, row + r0 * d.ld + d.q(h), d.ld, kt + c0, T, 0.0f,
                   S + int64_t(r0) * T + c0, T);
      for (int t = r0; t < r1; ++t) {
        const int s0 = starts[t];
        float* arow = a + int64_t(t) * T;
        std::memset(arow, 0, sizeof(float) * size_t(T));
        softmax_row(arow + s0, S + int64_t(t) * T + s0, t - s0 + 1, d.scale);
        // The row of S is spent: with dropout it takes the dropped probabilities.
        if (drop.on()) dropout_attention_row(S + int64_t(t) * T, arow, s0, t, T, drop, key, drop.first_slot + b);
      }
      const float* P = drop.on() ? S : a;
      head_product(d.small, false, r1 - r0, hs, r1 - c0, 1.0f, P + int64_t(r0) * T + c0, T,
                   row + c0 * d.ld + d.v(kv), d.ld, 0.0f, out + (int64_t(b) * T + r0) * d.C + d.q(h), d.C);
    });
  });
}

void gqa_attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout, const float* qkv,
                            const float* att, const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                            const DropoutMask& drop, const AttentionPlan& plan) {
  check_heads("gqa_attention_backward", NH, KV);
  const GqaDims d(B, T, NH, KV, hs, plan);
  // Scratch: dS [T, T], V^T [hs, T], and with dropout the dropped probabilities [T, T].
  const size_t squares = drop.on() ? 2 : 1;
  for_each_head(pool, scratch, B, KV, squares * T * T + size_t(hs) * T, [&](int b, int kv, int p) {
    float* dS = scratch.per_thread[size_t(p)].data();
    float* vt = dS + int64_t(T) * T;
    float* dropped = vt + int64_t(hs) * T;
    const int32_t* starts = doc_start + int64_t(b) * T;
    const float* row = qkv + int64_t(b) * T * d.ld;
    float* drow = dqkv + int64_t(b) * T * d.ld;
    const float* k = row + d.k(kv);
    transpose_head(vt, row + d.v(kv), T, hs, d.ld);
    for (int g = 0; g < d.G; ++g) {
      const int h = kv * d.G + g;
      const float* dO = dout + int64_t(b) * T * d.C + d.q(h);
      const float* P = att + (int64_t(b) * NH + h) * T * T;
      const float beta = g == 0 ? 0.0f : 1.0f;
      const uint64_t key = drop.on() ? head_key(drop.key, drop.first_col + h) : 0;
      for_each_row_block(starts, T, d.block, [&](int r0, int r1, int c0) {
        head_product(d.small, false, r1 - r0, r1 - c0, hs, 1.0f, dO + r0 * d.C, d.C, vt + c0, T, 0.0f,
                     dS + int64_t(r0) * T + c0, T);
        for (int t = r0; t < r1; ++t) {
          const int s0 = starts[t];
          float* r = dS + int64_t(t) * T;
          if (drop.on()) {
            dropout_attention_row(r, r, s0, t, T, drop, key, drop.first_slot + b);
            dropout_attention_row(dropped + int64_t(t) * T, P + int64_t(t) * T, s0, t, T, drop, key,
                                  drop.first_slot + b);
          }
          softmax_row_backward(r + s0, P + int64_t(t) * T + s0, r + s0, t - s0 + 1);
          // The column blocks below read this row on [0, r1): zero outside [s0, t].
          if (s0 > 0) std::memset(r, 0, sizeof(float) * size_t(s0));
          if (t + 1 < r1) std::memset(r + t + 1, 0, sizeof(float) * size_t(r1 - t - 1));
        }
        head_product(d.small, false, r1 - r0, hs, r1 - c0, d.scale, dS + int64_t(r0) * T + c0, T, k + c0 * d.ld,
                     d.ld, 0.0f, drow + r0 * d.ld + d.q(h), d.ld);
      });
      const float* Pv = drop.on() ? dropped : P;
      for_each_column_block(starts, T, d.block, [&](int k0, int k1, int e) {
        head_product(d.small, true, k1 - k0, hs, e - k0, d.scale, dS + int64_t(k0) * T + k0, T,
                     row + k0 * d.ld + d.q(h), d.ld, beta, drow + k0 * d.ld + d.k(kv), d.ld);
        head_product(d.small, true, k1 - k0, hs, e - k0, 1.0f, Pv + int64_t(k0) * T + k0, T, dO + k0 * d.C, d.C, beta,
                     drow + k0 * d.ld + d.v(kv), d.ld);
      });
    }
  });
}

}  // namespace troupe::kernels::cpu
