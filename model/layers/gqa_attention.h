// Llama's attention: grouped-query (KV kv heads shared by NH query heads, NH % KV ==
// 0), rotary positions on q and k, no biases, weights in nn.Linear's [out, in] layout.
//
// hs is the head size (AttentionConfig::head_size, model.head_dim; D / NH when unset),
// so the attention width NH hs may differ from D. On tensor-parallel rank t of TP:
// NHt = NH / TP query heads (global heads [t NHt, (t+1) NHt)), Dt = NHt hs. Its kv
// heads KVl: KV / TP of its own when KV divides by TP; otherwise (TP % KV == 0) k_proj
// and v_proj are whole on every rank and the rank computes only kv head
// g = t NHt / (NH / KV), the one all its query heads read, so the group sums k_proj's
// and v_proj's gradients (partial_grads).
//   qkv[N, (NHt + 2 KVl) hs] = x [Wq_t | Wk_l | Wv_l]^T     (q | k | v per token)
//   q, k rotated by the tokens' positions (rope.h), in place
//   y[N, Dt] = dropout(softmax(q k^T / sqrt(hs))) v, causal within the document, query
//              head h reading kv head h / (NHt / KVl)
//   out[Nr, D] = residual + dropout(y Wo_t^T)   (Wo_t [D, Dt]; row-parallel, summed over
//              the group)
// saved: qkv (rotated) [cap, (NHt + 2 KVl) hs] | att [cap.batch, NHt, cap.seq, cap.seq]
//        (not under selective recomputation: in Workspace::recompute) | y [cap, Dt].
// Backward scratch: dqkv [N, (NHt + 2 KVl) hs] in Workspace::big; dy [N, Dt] in
// Workspace::small [N, D] when Dt <= D, else in big after dqkv.
#pragma once

#include "model/layers/attention.h"
#include "model/layers/rope.h"

namespace troupe::model::layers {

class GroupedQueryAttention final : public Attention {
 public:
  GroupedQueryAttention(const AttentionConfig& c, AttentionWeights w, TpContext& tp, Capacity cap);
  int64_t saved_floats() const override;
  int64_t scratch_width() const override { return qkv_width() + (dy_in_big() ? int64_t(NHt_) * hs_ : 0); }
  // d o_proj's output [cap, D] (gathered) | dqkv [cap, q | k | v width].
  int64_t deferred_floats() const override { return cap_.tokens() * (D_ + qkv_width()); }
  int64_t recompute_floats() const override { return selective_ ? att_floats() : 0; }
  void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
               const Workspace& ws) override;
  float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) override;
  void partial_grads(std::vector<TpContext::Span>& out) const override;

 private:
  struct Saved {
    float *qkv, *att, *y;
  };
  Saved carve(float* saved) const;
  int64_t qkv_width() const { return int64_t(NHt_ + 2 * KVl_) * hs_; }
  // dy [N, Dt] does not fit Workspace::small [N, D] (heads wider than the model).
  bool dy_in_big() const { return int64_t(NHt_) * hs_ > D_; }
  int64_t att_floats() const { return int64_t(cap_.batch) * NHt_ * cap_.seq * cap_.seq; }

  AttentionWeights w_;
  // The kv rows this rank multiplies: its own slice, or kv head g of the whole tensors.
  Weight k_, v_;
  TpContext& tp_;
  Capacity cap_;
  const Rope& rope_;
  DropoutConfig probs_dropout_, output_dropout_;
  bool selective_;
  int D_, hs_, NHt_, KVl_;
  bool kv_replicated_;
  int64_t kv_floats_;  // elements of the whole k_proj (and v_proj) when replicated
};

}  // namespace troupe::model::layers
