// The feed-forward half of a block: a column-parallel expansion to the ffn width,
// an activation, and a row-parallel projection back (parallel_linear.h).
//
// Two implementations chosen by MlpConfig::kind: GeluMlp (GPT-2: c_fc, tanh GELU,
// c_proj, with biases) and SwiGluMlp (Llama: gate and up projections of ffn_width
// each, silu(gate) * up, down; no biases; swiglu_mlp.h).
#pragma once

#include <memory>

#include "model/layers/dropout.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"

namespace troupe::model::layers {

enum class MlpKind { kGelu, kSwiGlu };

struct MlpConfig {
  MlpKind kind = MlpKind::kGelu;
  int width = 0;      // D
  int ffn_width = 0;  // F over the whole group
  DropoutConfig output_dropout;  // hidden_dropout before the residual add (layers/dropout.h)
  // Selective recomputation: the activation's output (GELU's g, SwiGLU's h) is not kept
  // in the slot but lives in Workspace::recompute and is recomputed in backward from
  // the saved pre-activations.
  bool selective_recompute = false;
};

// kGelu: fc c_fc, this rank's columns [D, Ft] and bias [Ft]; proj c_proj, rows [Ft,
// D] and the replicated bias [D] (Ft = F / TP).
// kSwiGlu: fc_w gate_proj and up_w up_proj, this rank's rows [Ft, D] each; proj_w
// down_proj's columns [D, Ft]. No biases.
struct MlpWeights {
  Weight fc_w, fc_b, proj_w, proj_b;
  Weight up_w;
};

class Mlp {
 public:
  virtual ~Mlp() = default;
  virtual int64_t saved_floats() const = 0;
  // Floats per token the backward needs in Workspace::big.
  virtual int64_t scratch_width() const = 0;
  // Floats of Workspace::recompute it needs (selective recomputation; 0 otherwise).
  virtual int64_t recompute_floats() const { return 0; }
  // Floats of output gradients its backward keeps for the weight pass when it defers
  // its weight GEMMs (Workspace::defer; weight_grad_queue.h), at capacity.
  virtual int64_t deferred_floats() const = 0;
  // out[Nr, D] = residual[Nr, D] + dropout(mlp(x)), x[N, D] with this rank's rows
  // filled (completed in place under SP and kept for backward); N = seq.tokens(). out
  // may not alias residual.
  virtual void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                       const Workspace& ws) = 0;
  // dout[N, D] with this rank's rows filled (completed in place under SP). Returns
  // this rank's rows [Nr, D] of d mlp / d x (in ws.small), the residual's share not included.
  virtual float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) = 0;
};

std::unique_ptr<Mlp> make_mlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap);

//   h[N, Ft] = x W_fc + b_fc;  g = gelu(h);  out[Nr, D] = residual + dropout(g W_proj + b_proj)
// saved: h [cap, Ft] | g [cap, Ft] (not under selective recomputation: in
// Workspace::recompute, recomputed as gelu(h)).
class GeluMlp final : public Mlp {
 public:
  GeluMlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap);
  int64_t saved_floats() const override { return (selective_ ? 1 : 2) * cap_.tokens() * Ft_; }
  int64_t scratch_width() const override { return Ft_; }
  int64_t recompute_floats() const override { return selective_ ? cap_.tokens() * Ft_ : 0; }
  // d c_proj's output [cap, D] (gathered) | dh [cap, Ft].
  int64_t deferred_floats() const override { return cap_.tokens() * (D_ + int64_t(Ft_)); }
  void forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
               const Workspace& ws) override;
  float* backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) override;

 private:
  MlpWeights w_;
  TpContext& tp_;
  Capacity cap_;
  DropoutConfig output_dropout_;
  bool selective_;
  int D_, Ft_;
};

}  // namespace troupe::model::layers
