#include "model/layers/gqa_attention.h"

#include <stdexcept>
#include <string>

#include "model/layers/parallel_linear.h"

namespace troupe::model::layers {

namespace {

Weight rows_from(Weight w, int64_t offset) { return {w.value + offset, w.grad + offset}; }

}  // namespace

GroupedQueryAttention::GroupedQueryAttention(const AttentionConfig& c, AttentionWeights w, TpContext& tp,
                                             Capacity cap)
    : w_(w),
      tp_(tp),
      cap_(cap),
      rope_(*c.rope),
      probs_dropout_(c.probs_dropout),
      output_dropout_(c.output_dropout),
      selective_(c.selective_recompute),
      D_(c.width) {
  const int TP = tp.size(), NH = c.heads, KV = c.kv_heads;
  if (NH < 1 || KV < 1 || c.head_size < 0 || (c.head_size == 0 && c.width % NH != 0) || NH % KV != 0 ||
      NH % TP != 0 || (KV % TP != 0 && TP % KV != 0))
    throw std::invalid_argument("GroupedQueryAttention: width " + std::to_string(c.width) + ", heads " +
                                std::to_string(NH) + " (head size " + std::to_string(c.head_size) + ") and kv heads " +
                                std::to_string(KV) + " do not split over " + std::to_string(TP) +
                                " tensor-parallel ranks");
  if (!c.rope) throw std::invalid_argument("GroupedQueryAttention: needs the rotary tables");
  hs_ = c.head_size > 0 ? c.head_size : c.width / NH;
  if (rope_.head_size() != hs_) throw std::invalid_argument("GroupedQueryAttention: rotary tables of another head size");
  NHt_ = NH / TP;
  kv_replicated_ = KV % TP != 0;
  KVl_ = kv_replicated_ ? 1 : KV / TP;
  kv_floats_ = int64_t(KV) * hs_ * D_;
  if (kv_replicated_) {
    const int64_t g = int64_t(tp.rank()) * NHt_ / (NH / KV);
    k_ = rows_from(w.k_w, g * hs_ * D_);
    v_ = rows_from(w.v_w, g * hs_ * D_);
  } else {
    k_ = w.k_w;
    v_ = w.v_w;
  }
}

int64_t GroupedQueryAttention::saved_floats() const {
  const int64_t n = cap_.tokens();
  return n * qkv_width() + (selective_ ? 0 : att_floats()) + n * NHt_ * hs_;
}

GroupedQueryAttention::Saved GroupedQueryAttention::carve(float* saved) const {
  const int64_t n = cap_.tokens();
  Carver c(saved);
  Saved s;
  s.qkv = c.take(n * qkv_width());
  s.att = selective_ ? nullptr : c.take(att_floats());
  s.y = c.take(n * NHt_ * hs_);
  return s;
}

void GroupedQueryAttention::forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                                    const Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens(), Dt = NHt_ * hs_, KVs = KVl_ * hs_;
  const int64_t W = qkv_width();
  kernels::Device& dev = tp_.device();
  tp_.gather_sequence(x, N, D_);
  linear_nt_forward(dev, s.qkv, W, x, w_.q_w, N, D_, Dt);
  linear_nt_forward(dev, s.qkv + Dt, W, x, k_, N, D_, KVs);
  linear_nt_forward(dev, s.qkv + Dt + KVs, W, x, v_, N, D_, KVs);
  rope_.forward(s.qkv, seq.positions, N, NHt_ + KVl_, W);  // q and k heads are adjacent
  dev.gqa_attention_forward(s.y, selective_ ? ws.recompute : s.att, s.qkv, seq.doc_start, seq.B, seq.T, NHt_, KVl_,
                            hs_, dropout_mask(probs_dropout_, seq, tp_.rank() * NHt_));
  const kernels::DropoutMask out_mask = dropout_mask(output_dropout_, seq, 0);
  row_parallel_nt_forward(tp_, out, s.y, w_.proj_w, out_mask.on() ? nullptr : residual, N, Dt, D_, ws.small);
  if (out_mask.on()) dropout_add_residual(tp_, out_mask, seq, out, residual, D_);
}

float* GroupedQueryAttention::backward(float* saved, float* dout, const float* x, const Sequence& seq,
                                       const Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens(), Dt = NHt_ * hs_, KVs = KVl_ * hs_;
  const int64_t W = qkv_width();
  kernels::Device& dev = tp_.device();
  float* dqkv = ws.big;                                     // [N, W]
  float* dy = dy_in_big() ? ws.big + int64_t(N) * W : ws.small;  // [N, Dt]
  const kernels::DropoutMask probs = dropout_mask(probs_dropout_, seq, tp_.rank() * NHt_);
  float* att = s.att;
  if (selective_) {  // att again from the saved (rotated) qkv; y rewritten with the same bits
    att = ws.recompute;
    dev.gqa_attention_forward(s.y, att, s.qkv, seq.doc_start, seq.B, seq.T, NHt_, KVl_, hs_, probs);
  }
  float* dproj = dropout_backward_rows(tp_, dropout_mask(output_dropout_, seq, 0), seq, dout, ws.masked, D_);
  row_parallel_nt_backward(tp_, dy, dproj, s.y, w_.proj_w, N, Dt, D_, ws.defer);
  dev.gqa_attention_backward(dqkv, dy, s.qkv, att, seq.doc_start, seq.B, seq.T, NHt_, KVl_, hs_, probs);
  rope_.backward(dqkv, seq.positions, N, NHt_ + KVl_, W);
  // The weight pass reads dqkv after the scratch is reused: kept in the slot's region.
  const float* kept = ws.defer ? ws.defer->keep(dev, dqkv, int64_t(N) * W) : dqkv;
  float* dx = ws.small;  // [N, D]; dy is spent
  linear_nt_backward(dev, dx, false, kept, W, x, w_.q_w, N, D_, Dt, ws.defer);
  linear_nt_backward(dev, dx, true, kept + Dt, W, x, k_, N, D_, KVs, ws.defer);
  linear_nt_backward(dev, dx, true, kept + Dt + KVs, W, x, v_, N, D_, KVs, ws.defer);
  return tp_.complete_input_grad(dx, N, D_);
}

void GroupedQueryAttention::partial_grads(std::vector<TpContext::Span>& out) const {
  if (!kv_replicated_) return;
  out.push_back({w_.k_w.grad, kv_floats_});
  out.push_back({w_.v_w.grad, kv_floats_});
}

}  // namespace troupe::model::layers
