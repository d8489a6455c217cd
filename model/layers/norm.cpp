#include "model/layers/norm.h"

#include <stdexcept>

namespace troupe::model::layers {

std::unique_ptr<Norm> make_norm(const NormConfig& c, NormWeights w, kernels::Device& device, int64_t capacity_rows) {
  switch (c.kind) {
    case NormKind::kLayerNorm:
      return std::make_unique<LayerNorm>(c, w, device, capacity_rows);
    case NormKind::kRmsNorm:
      return std::make_unique<RmsNorm>(c, w, device, capacity_rows);
  }
  throw std::invalid_argument("make_norm: unknown norm kind");
}

LayerNorm::LayerNorm(const NormConfig& c, NormWeights w, kernels::Device& device, int64_t capacity_rows)
    : c_(c), w_(w), dev_(device), capacity_rows_(capacity_rows) {
  if (!w_.scale || !w_.shift) throw std::invalid_argument("LayerNorm: needs a scale and a shift");
}

void LayerNorm::forward(float* saved, float* out, const float* x, int n) {
  float* mean = saved;
  float* rstd = saved + capacity_rows_;
  dev_.layernorm_forward(out, mean, rstd, x, w_.scale.value, w_.shift.value, n, c_.width, c_.eps);
}

void LayerNorm::backward(const float* saved, float* dx, const float* dout, const float* x, int n) {
  const float* mean = saved;
  const float* rstd = saved + capacity_rows_;
  dev_.layernorm_backward(dx, w_.scale.grad, w_.shift.grad, dout, x, w_.scale.value, mean, rstd, n, c_.width);
}

void LayerNorm::row_sharded_grads(std::vector<TpContext::Span>& out) const {
  out.push_back({w_.scale.grad, c_.width});
  out.push_back({w_.shift.grad, c_.width});
}

RmsNorm::RmsNorm(const NormConfig& c, NormWeights w, kernels::Device& device, int64_t capacity_rows)
    : c_(c), w_(w), dev_(device), capacity_rows_(capacity_rows) {
  if (!w_.scale || w_.shift) throw std::invalid_argument("RmsNorm: needs a scale and no shift");
}

void RmsNorm::forward(float* saved, float* out, const float* x, int n) {
  dev_.rmsnorm_forward(out, saved, x, w_.scale.value, n, c_.width, c_.eps);
}

void RmsNorm::backward(const float* saved, float* dx, const float* dout, const float* x, int n) {
  dev_.rmsnorm_backward(dx, w_.scale.grad, dout, x, w_.scale.value, saved, n, c_.width);
}

void RmsNorm::row_sharded_grads(std::vector<TpContext::Span>& out) const { out.push_back({w_.scale.grad, c_.width}); }

}  // namespace troupe::model::layers
