#include "model/block.h"

#include <algorithm>

namespace troupe::model {

Block::Block(const BlockConfig& c, BlockWeights w, layers::TpContext& tp, layers::Capacity cap)
    : tp_(tp), cap_(cap), D_(c.norm.width) {
  const int64_t rows = tp.rows(cap.tokens());
  norm_1_ = layers::make_norm(c.norm, w.norm_1, tp.device(), rows);
  attention_ = layers::make_attention(c.attention, w.attention, tp, cap);
  norm_2_ = layers::make_norm(c.norm, w.norm_2, tp.device(), rows);
  mlp_ = layers::make_mlp(c.mlp, w.mlp, tp, cap);
}

int64_t Block::saved_floats() const {
  const int64_t n = cap_.tokens(), rows = tp_.rows(n);
  return 2 * n * D_ + rows * D_ + norm_1_->saved_floats() + norm_2_->saved_floats() + attention_->saved_floats() +
         mlp_->saved_floats();
}

int64_t Block::scratch_width() const { return std::max(attention_->scratch_width(), mlp_->scratch_width()); }

int64_t Block::recompute_floats() const { return std::max(attention_->recompute_floats(), mlp_->recompute_floats()); }

int64_t Block::deferred_floats() const { return attention_->deferred_floats() + mlp_->deferred_floats(); }

Block::Saved Block::carve(float* saved) const {
  const int64_t n = cap_.tokens(), rows = tp_.rows(n);
  layers::Carver c(saved);
  Saved s;
  s.norm_1_out = c.take(n * D_);
  s.norm_1 = c.take(norm_1_->saved_floats());
  s.attention = c.take(attention_->saved_floats());
  s.h = c.take(rows * D_);
  s.norm_2_out = c.take(n * D_);
  s.norm_2 = c.take(norm_2_->saved_floats());
  s.mlp = c.take(mlp_->saved_floats());
  return s;
}

void Block::forward(float* saved, float* out, const float* x, const layers::Sequence& seq,
                    const layers::Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens(), rows = int(tp_.rows(N));
  const int64_t mine = tp_.first_row(N) * D_;
  norm_1_->forward(s.norm_1, s.norm_1_out + mine, x, rows);
  attention_->forward(s.attention, s.h, s.norm_1_out, x, seq, ws);
  norm_2_->forward(s.norm_2, s.norm_2_out + mine, s.h, rows);
  mlp_->forward(s.mlp, out, s.norm_2_out, s.h, seq, ws);
}

void Block::backward(float* saved, float* dres, const float* x, const layers::Sequence& seq,
                     const layers::Workspace& ws) {
  const Saved s = carve(saved);
  const int N = seq.tokens(), rows = int(tp_.rows(N));
  float* dres_mine = dres + tp_.first_row(N) * D_;
  // d h = d out + (d mlp(norm_2(h)) / d h): the norm's backward adds into dres.
  const float* dnorm_2 = mlp_->backward(s.mlp, dres, s.norm_2_out, seq, ws);
  norm_2_->backward(s.norm_2, dres_mine, dnorm_2, s.h, rows);
  // d x = d h + (d attention(norm_1(x)) / d x).
  const float* dnorm_1 = attention_->backward(s.attention, dres, s.norm_1_out, seq, ws);
  norm_1_->backward(s.norm_1, dres_mine, dnorm_1, x, rows);
}

void Block::partial_grads(std::vector<layers::TpContext::Span>& out) const {
  if (tp_.sequence()) {
    norm_1_->row_sharded_grads(out);
    norm_2_->row_sharded_grads(out);
  }
  attention_->partial_grads(out);
}

}  // namespace troupe::model
