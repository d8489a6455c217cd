// Llama's MLP, weights in nn.Linear's [out, in] layout, no biases (Ft = F / TP):
//   gate[N, Ft] = x Wg_t^T;  up[N, Ft] = x Wu_t^T      (column-parallel: rows of gate_proj, up_proj)
//   h[N, Ft] = silu(gate) * up
//   out[Nr, D] = residual + dropout(h Wd_t^T)          (row-parallel: columns of down_proj)
// saved: gate [cap, Ft] | up [cap, Ft] | h [cap, Ft] (not under selective recomputation:
// in Workspace::recompute, recomputed from gate and up). The backward turns gate and up
// into their gradients in place (the slot is spent once its backward has run).
#pragma once

#include "model/layers/mlp.h"

namespace troupe::model::layers {

class SwiGluMlp final : public Mlp {
 public:
  SwiGluMlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap);
  int64_t saved_floats() const override { return (selective_ ? 2 : 3) * cap_.tokens() * Ft_; }
  int64_t scratch_width() const override { return Ft_; }
  void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
               const Workspace& ws) override;
  float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) override;
  int64_t recompute_floats() const override { return selective_ ? cap_.tokens() * Ft_ : 0; }
  // d down_proj's output [cap, D] (gathered); dgate and dup stay in the slot.
  int64_t deferred_floats() const override { return cap_.tokens() * D_; }

 private:
  MlpWeights w_;
  TpContext& tp_;
  Capacity cap_;
  DropoutConfig output_dropout_;
  bool selective_;
  int D_, Ft_;
};

}  // namespace troupe::model::layers
