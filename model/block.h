// One pre-norm transformer block composed of layers (model/layers):
//   h   = x + attention(norm_1(x))
//   out = h + mlp(norm_2(h))
// Which norm, attention and MLP it is comes from BlockConfig's kinds (make_norm,
// make_attention, make_mlp); tensor and sequence parallelism live inside the layers,
// so nothing here depends on either.
//
// Residual rows: x, h and out are [Nr, D], the rows this tensor-parallel rank holds
// (layers/tp_context.h). The normed activations are [N, D]: each norm writes this
// rank's rows and the column-parallel layer after it completes the rest in place.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/mlp.h"
#include "model/layers/norm.h"

namespace troupe::model {

struct BlockConfig {
  layers::NormConfig norm;
  layers::AttentionConfig attention;
  layers::MlpConfig mlp;
};

struct BlockWeights {
  layers::NormWeights norm_1;
  layers::AttentionWeights attention;
  layers::NormWeights norm_2;
  layers::MlpWeights mlp;
};

class Block {
 public:
  Block(const BlockConfig& c, BlockWeights w, layers::TpContext& tp, layers::Capacity cap);
  // Floats one slot saves: norm_1 output [cap, D] | norm_1 | attention | h [capR, D] |
  // norm_2 output [cap, D] | norm_2 | mlp (capR: the capacity's residual rows).
  int64_t saved_floats() const;
  // Floats per token the block's backward needs in Workspace::big.
  int64_t scratch_width() const;
  // Floats of Workspace::recompute its layers need (selective recomputation; else 0).
  int64_t recompute_floats() const;
  // Floats of output gradients a backward with Workspace::defer keeps for the weight
  // pass (the attention's, then the MLP's; weight_grad_queue.h).
  int64_t deferred_floats() const;
  // out[Nr, D] = block(x[Nr, D]); N = B*T tokens. out may not alias x.
  void forward(float* saved, float* out, const float* x, const layers::Sequence& seq, const layers::Workspace& ws);
  // dres[N, D]: rows [first_row, first_row + Nr) hold d loss / d out on entry and
  // d loss / d x on return; the other rows are scratch. x as given to forward. With
  // ws.defer the linears' weight GEMMs are queued there, not issued.
  void backward(float* saved, float* dres, const float* x, const layers::Sequence& seq, const layers::Workspace& ws);
  // The gradients of replicated weights that hold this rank's share only until the
  // group sums them: the norms' under sequence parallelism (layers/norm.h), and the
  // attention's partial ones (a grouped-query attention's replicated k and v).
  void partial_grads(std::vector<layers::TpContext::Span>& out) const;

 private:
  struct Saved {
    float *norm_1_out, *norm_1, *attention, *h, *norm_2_out, *norm_2, *mlp;
  };
  Saved carve(float* saved) const;

  layers::TpContext& tp_;
  layers::Capacity cap_;
  int D_;
  std::unique_ptr<layers::Norm> norm_1_, norm_2_;
  std::unique_ptr<layers::Attention> attention_;
  std::unique_ptr<layers::Mlp> mlp_;
};

}  // namespace troupe::model
