// Self-attention: causal within each token's document (Microbatch::segments give
// doc_start), the qkv projection column-parallel by heads and the output projection
// row-parallel (parallel_linear.h), so a rank runs its heads only.
//
// Two implementations behind one interface, chosen by AttentionConfig::kind:
// MultiHeadAttention (GPT-2: one c_attn projection with bias, positions learned in
// the embedding) and GroupedQueryAttention (Llama: q, k, v projections without bias,
// kv_heads <= heads, rotary positions; gqa_attention.h).
#pragma once

#include <memory>
#include <vector>

#include "model/layers/dropout.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"

namespace troupe::model::layers {

enum class AttentionKind { kMultiHead, kGroupedQuery };

class Rope;

struct AttentionConfig {
  AttentionKind kind = AttentionKind::kMultiHead;
  int width = 0;     // D
  int heads = 0;     // NH over the whole group
  int kv_heads = 0;  // KV (kGroupedQuery); NH % KV == 0
  // hs (kGroupedQuery; model.head_dim); 0: D / NH. kMultiHead's is always D / NH.
  int head_size = 0;
  // The rotary tables (kGroupedQuery; shared by the stage's layers, outlives them).
  const Rope* rope = nullptr;
  // attention_dropout on the probabilities; hidden_dropout on the output projection
  // before the residual add (layers/dropout.h).
  DropoutConfig probs_dropout, output_dropout;
  // Selective recomputation: the probabilities att are not kept in the slot but live in
  // Workspace::recompute during forward and are recomputed from the saved qkv in
  // backward (the same kernel on the same inputs: the same bits).
  bool selective_recompute = false;
};

// kMultiHead: qkv_w/qkv_b c_attn, this rank's q, k, v pieces [D, Dt] each and bias
// [3Dt]; proj_w/proj_b c_proj, rows [Dt, D] of the row-parallel output projection and
// its bias [D].
// kGroupedQuery: q_w, k_w, v_w the q_proj, k_proj, v_proj weights this rank holds
// ([out, in]: rows of its heads, or k_proj and v_proj whole when replicated); proj_w
// o_proj's columns [D, NHt hs]. No biases.
struct AttentionWeights {
  Weight qkv_w, qkv_b, proj_w, proj_b;
  Weight q_w, k_w, v_w;
};

class Attention {
 public:
  virtual ~Attention() = default;
  virtual int64_t saved_floats() const = 0;
  // Floats per token the backward needs in Workspace::big.
  virtual int64_t scratch_width() const = 0;
  // Floats of Workspace::recompute it needs (selective recomputation; 0 otherwise).
  virtual int64_t recompute_floats() const { return 0; }
  // Floats of output gradients its backward keeps for the weight pass when it defers
  // its weight GEMMs (Workspace::defer; weight_grad_queue.h), at capacity.
  virtual int64_t deferred_floats() const = 0;
  // out[Nr, D] = residual[Nr, D] + dropout(attention(x)), x[N, D] the normed input with
  // this rank's rows filled (completed in place under SP and kept for backward).
  virtual void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                       const Workspace& ws) = 0;
  // dout[N, D] with this rank's rows filled (completed in place under SP); x as given
  // to forward. Returns dx: this rank's rows [Nr, D] of d attention / d x (in ws.small),
  // the residual's share not included.
  virtual float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) = 0;
  // Gradients of replicated weights that hold only this rank's share until the group
  // sums them (GroupedQueryAttention's whole k_proj and v_proj); none by default.
  virtual void partial_grads(std::vector<TpContext::Span>&) const {}
};

std::unique_ptr<Attention> make_attention(const AttentionConfig& c, AttentionWeights w, TpContext& tp,
                                          Capacity cap);

// GPT-2's: NHt = NH / TP heads here, Dt = D / TP.
//   qkv[N, 3Dt] = x W_qkv + b          (q | k | v, head h at [h hs, (h+1) hs) of each)
//   att[B, NHt, T, T] = softmax(q k^T / sqrt(hs)), causal within the document
//   y[N, Dt] = dropout(att) v          (heads concatenated)
//   out[Nr, D] = residual + dropout(y W_proj + b_proj)   (summed over the group)
// saved: qkv [cap, 3Dt] | att [cap.batch, NHt, cap.seq, cap.seq] (not under selective
// recomputation: in Workspace::recompute) | y [cap, Dt].
class MultiHeadAttention final : public Attention {
 public:
  MultiHeadAttention(const AttentionConfig& c, AttentionWeights w, TpContext& tp, Capacity cap);
  int64_t saved_floats() const override;
  int64_t scratch_width() const override { return 3 * int64_t(Dt_); }
  int64_t recompute_floats() const override { return selective_ ? att_floats() : 0; }
  // d proj's input [cap, D] (gathered) | dqkv [cap, 3Dt].
  int64_t deferred_floats() const override { return cap_.tokens() * (D_ + 3 * int64_t(Dt_)); }
  void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
               const Workspace& ws) override;
  float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) override;

 private:
  struct Saved {
    float *qkv, *att, *y;
  };
  Saved carve(float* saved) const;
  int64_t att_floats() const { return int64_t(cap_.batch) * NHt_ * cap_.seq * cap_.seq; }

  AttentionWeights w_;
  TpContext& tp_;
  Capacity cap_;
  DropoutConfig probs_dropout_, output_dropout_;
  bool selective_;
  int D_, Dt_, NHt_;
};

}  // namespace troupe::model::layers
