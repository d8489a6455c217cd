#include "model/layers/swiglu_mlp.h"

#include <stdexcept>
#include <string>

#include "model/layers/parallel_linear.h"

namespace troupe::model::layers {

SwiGluMlp::SwiGluMlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap)
    : w_(w),
      tp_(tp),
      cap_(cap),
      output_dropout_(c.output_dropout),
      selective_(c.selective_recompute),
      D_(c.width),
      Ft_(c.ffn_width / tp.size()) {
  if (c.ffn_width % tp.size() != 0)
    throw std::invalid_argument("SwiGluMlp: ffn width " + std::to_string(c.ffn_width) + " does not split over " +
                                std::to_string(tp.size()) + " tensor-parallel ranks");
}

void SwiGluMlp::forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                        const Workspace& ws) {
  const int N = seq.tokens();
  const int64_t slot = cap_.tokens() * Ft_;
  float* gate = saved;
  float* up = saved + slot;
  float* h = selective_ ? ws.recompute : saved + 2 * slot;
  kernels::Device& dev = tp_.device();
  tp_.gather_sequence(x, N, D_);
  linear_nt_forward(dev, gate, Ft_, x, w_.fc_w, N, D_, Ft_);
  linear_nt_forward(dev, up, Ft_, x, w_.up_w, N, D_, Ft_);
  dev.swiglu_forward(h, gate, up, int64_t(N) * Ft_);
  const kernels::DropoutMask out_mask = dropout_mask(output_dropout_, seq, 0);
  row_parallel_nt_forward(tp_, out, h, w_.proj_w, out_mask.on() ? nullptr : residual, N, Ft_, D_, ws.small);
  if (out_mask.on()) dropout_add_residual(tp_, out_mask, seq, out, residual, D_);
}

float* SwiGluMlp::backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) {
  const int N = seq.tokens();
  const int64_t slot = cap_.tokens() * Ft_;
  float* gate = saved;
  float* up = saved + slot;
  const float* h = saved + 2 * slot;
  kernels::Device& dev = tp_.device();
  if (selective_) {  // h = silu(gate) up again, before the backward turns gate and up into gradients
    dev.swiglu_forward(ws.recompute, gate, up, int64_t(N) * Ft_);
    h = ws.recompute;
  }
  float* dh = ws.big;  // [N, Ft]
  float* dproj = dropout_backward_rows(tp_, dropout_mask(output_dropout_, seq, 0), seq, dout, ws.masked, D_);
  row_parallel_nt_backward(tp_, dh, dproj, h, w_.proj_w, N, Ft_, D_, ws.defer);
  // gate, up <- dgate, dup, in the slot: the weight pass reads them there.
  dev.swiglu_backward(gate, up, dh, gate, up, int64_t(N) * Ft_);
  float* dx = ws.small;  // [N, D]
  linear_nt_backward(dev, dx, false, gate, Ft_, x, w_.fc_w, N, D_, Ft_, ws.defer);
  linear_nt_backward(dev, dx, true, up, Ft_, x, w_.up_w, N, D_, Ft_, ws.defer);
  return tp_.complete_input_grad(dx, N, D_);
}

}  // namespace troupe::model::layers
