#include "model/layers/attention.h"

#include <stdexcept>
#include <string>

#include "model/layers/gqa_attention.h"
#include "model/layers/parallel_linear.h"

namespace troupe::model::layers {

std::unique_ptr<Attention> make_attention(const AttentionConfig& c, AttentionWeights w, TpContext& tp,
                                          Capacity cap) {
  switch (c.kind) {
    case AttentionKind::kMultiHead:
      return std::make_unique<MultiHeadAttention>(c, w, tp, cap);
    case AttentionKind::kGroupedQuery:
      return std::make_unique<GroupedQueryAttention>(c, w, tp, cap);
  }
  throw std::invalid_argument("make_attention: unknown attention kind");
}

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& c, AttentionWeights w, TpContext& tp, Capacity cap)
    : w_(w),
      tp_(tp),
      cap_(cap),
      probs_dropout_(c.probs_dropout),
      output_dropout_(c.output_dropout),
      selective_(c.selective_recompute),
      D_(c.width),
      Dt_(c.width / tp.size()),
      NHt_(c.heads / tp.size()) {
  if (c.heads < 1 || c.width % c.heads != 0 || c.heads % tp.size() != 0)
    throw std::invalid_argument("MultiHeadAttention: width " + std::to_string(c.width) + " and heads " +
                                std::to_string(c.heads) + " do not split over " + std::to_string(tp.size()) +
                                " tensor-parallel ranks");
}

int64_t MultiHeadAttention::saved_floats() const {
  const int64_t n = cap_.tokens();
  return n * 3 * Dt_ + (selective_ ? 0 : att_floats()) + n * Dt_;
}

MultiHeadAttention::Saved MultiHeadAttention::carve(float* saved) const {
  const int64_t n = cap_.tokens();
  Carver c(saved);
  Saved s;
  s.qkv = c.take(n * 3 * Dt_);
  s.att = selective_ ? nullptr : c.take(att_floats());
  s.y = c.take(n * Dt_);
  return s;
}

void MultiHeadAttention::forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                                 const Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens();
  const kernels::DropoutMask out_mask = dropout_mask(output_dropout_, seq, 0);
  column_parallel_qkv_forward(tp_, s.qkv, x, w_.qkv_w, w_.qkv_b, N, D_, Dt_);
  tp_.device().attention_forward(s.y, selective_ ? ws.recompute : s.att, s.qkv, seq.doc_start, seq.B, seq.T, Dt_,
                                 NHt_, dropout_mask(probs_dropout_, seq, tp_.rank() * NHt_));
  row_parallel_forward(tp_, out, s.y, w_.proj_w, w_.proj_b, out_mask.on() ? nullptr : residual, N, Dt_, D_,
                       ws.small);
  if (out_mask.on()) dropout_add_residual(tp_, out_mask, seq, out, residual, D_);
}

float* MultiHeadAttention::backward(float* saved, float* dout, const float* x, const Sequence& seq,
                                    const Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens();
  float* dy = ws.small;   // [N, Dt]
  float* dqkv = ws.big;   // [N, 3Dt]
  const kernels::DropoutMask probs = dropout_mask(probs_dropout_, seq, tp_.rank() * NHt_);
  float* att = s.att;
  if (selective_) {  // att again (and y, rewritten with the same bits)
    att = ws.recompute;
    tp_.device().attention_forward(s.y, att, s.qkv, seq.doc_start, seq.B, seq.T, Dt_, NHt_, probs);
  }
  float* dproj = dropout_backward_rows(tp_, dropout_mask(output_dropout_, seq, 0), seq, dout, ws.masked, D_);
  row_parallel_backward(tp_, dy, dproj, s.y, w_.proj_w, w_.proj_b, nullptr, N, Dt_, D_, ws.defer);
  tp_.device().attention_backward(dqkv, dy, s.qkv, att, seq.doc_start, seq.B, seq.T, Dt_, NHt_, probs);
  return column_parallel_qkv_backward(tp_, ws.small, dqkv, x, w_.qkv_w, w_.qkv_b, N, D_, Dt_, ws.defer);
}

}  // namespace troupe::model::layers
