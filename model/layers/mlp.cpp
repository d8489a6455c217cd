#include "model/layers/mlp.h"

#include <stdexcept>
#include <string>

#include "model/layers/parallel_linear.h"
#include "model/layers/swiglu_mlp.h"

namespace troupe::model::layers {

std::unique_ptr<Mlp> make_mlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap) {
  switch (c.kind) {
    case MlpKind::kGelu:
      return std::make_unique<GeluMlp>(c, w, tp, cap);
    case MlpKind::kSwiGlu:
      return std::make_unique<SwiGluMlp>(c, w, tp, cap);
  }
  throw std::invalid_argument("make_mlp: unknown MLP kind");
}

GeluMlp::GeluMlp(const MlpConfig& c, MlpWeights w, TpContext& tp, Capacity cap)
    : w_(w),
      tp_(tp),
      cap_(cap),
      output_dropout_(c.output_dropout),
      selective_(c.selective_recompute),
      D_(c.width),
      Ft_(c.ffn_width / tp.size()) {
  if (c.ffn_width % tp.size() != 0)
    throw std::invalid_argument("GeluMlp: ffn width " + std::to_string(c.ffn_width) + " does not split over " +
                                std::to_string(tp.size()) + " tensor-parallel ranks");
}

void GeluMlp::forward(float* saved, float* out, float* x, const float* residual, const Sequence& seq,
                      const Workspace& ws) {
  const int N = seq.tokens();
  float* h = saved;
  float* g = selective_ ? ws.recompute : saved + cap_.tokens() * Ft_;
  const kernels::DropoutMask out_mask = dropout_mask(output_dropout_, seq, 0);
  column_parallel_forward(tp_, h, g, x, w_.fc_w, w_.fc_b, N, D_, Ft_);
  row_parallel_forward(tp_, out, g, w_.proj_w, w_.proj_b, out_mask.on() ? nullptr : residual, N, Ft_, D_, ws.small);
  if (out_mask.on()) dropout_add_residual(tp_, out_mask, seq, out, residual, D_);
}

float* GeluMlp::backward(float* saved, float* dout, const float* x, const Sequence& seq, const Workspace& ws) {
  const int N = seq.tokens();
  const float* h = saved;
  const float* g = saved + cap_.tokens() * Ft_;
  if (selective_) {  // g = gelu(h) again (the linear's GELU epilogue is the same elementwise function)
    tp_.device().gelu_forward(ws.recompute, h, int64_t(N) * Ft_);
    g = ws.recompute;
  }
  float* dh = ws.big;  // [N, Ft]: d g W_proj^T times gelu'(h)
  float* dproj = dropout_backward_rows(tp_, dropout_mask(output_dropout_, seq, 0), seq, dout, ws.masked, D_);
  row_parallel_backward(tp_, dh, dproj, g, w_.proj_w, w_.proj_b, h, N, Ft_, D_, ws.defer);
  return column_parallel_backward(tp_, ws.small, dh, x, w_.fc_w, w_.fc_b, N, D_, Ft_, ws.defer);
}

}  // namespace troupe::model::layers
