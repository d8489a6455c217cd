// Normalisation over the width of each row: LayerNorm (GPT-2) or RMSNorm (Llama: no
// mean, no shift), chosen by NormConfig::kind in make_norm, with no change to the
// blocks using it.
//
// A norm runs on the residual-stream rows this rank holds (Nr; tp_context.h): its
// parameters are replicated, and under sequence parallelism their gradients cover
// this rank's rows only until TpContext::sum_row_sharded_grads (row_sharded_grads).
#pragma once

#include <memory>
#include <vector>

#include "kernels/device.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"

namespace troupe::model::layers {

enum class NormKind { kLayerNorm, kRmsNorm };

struct NormConfig {
  NormKind kind = NormKind::kLayerNorm;
  int width = 0;  // D
  float eps = 1e-5f;
};

// scale[D] (LayerNorm's weight, initialised to 1) and shift[D] (its bias; absent in RMSNorm).
struct NormWeights {
  Weight scale, shift;
};

class Norm {
 public:
  virtual ~Norm() = default;
  // Floats saved per slot (the statistics of `capacity_rows` rows).
  virtual int64_t saved_floats() const = 0;
  // out[n, D] = norm(x[n, D]); the statistics go to `saved`.
  virtual void forward(float* saved, float* out, const float* x, int n) = 0;
  // dx[n, D] += d norm / d x applied to dout[n, D];  d scale[D] +=, d shift[D] +=.
  virtual void backward(const float* saved, float* dx, const float* dout, const float* x, int n) = 0;
  // The gradients a rank computes from its own rows (appended in a fixed order).
  virtual void row_sharded_grads(std::vector<TpContext::Span>& out) const = 0;
};

// capacity_rows: the most rows a slot normalises (Nr at capacity).
std::unique_ptr<Norm> make_norm(const NormConfig& c, NormWeights w, kernels::Device& device,
                                int64_t capacity_rows);

// out = (x - mean) * rstd * scale + shift; saved: mean [capacity_rows] | rstd [capacity_rows].
class LayerNorm final : public Norm {
 public:
  LayerNorm(const NormConfig& c, NormWeights w, kernels::Device& device, int64_t capacity_rows);
  int64_t saved_floats() const override { return 2 * capacity_rows_; }
  void forward(float* saved, float* out, const float* x, int n) override;
  void backward(const float* saved, float* dx, const float* dout, const float* x, int n) override;
  void row_sharded_grads(std::vector<TpContext::Span>& out) const override;

 private:
  NormConfig c_;
  NormWeights w_;
  kernels::Device& dev_;
  int64_t capacity_rows_;
};

// out = x * rstd * scale, rstd = 1 / sqrt(mean(x^2) + eps); no shift.
// saved: rstd [capacity_rows]. Needs Device::rmsnorm_* (the CPU device has them).
class RmsNorm final : public Norm {
 public:
  RmsNorm(const NormConfig& c, NormWeights w, kernels::Device& device, int64_t capacity_rows);
  int64_t saved_floats() const override { return capacity_rows_; }
  void forward(float* saved, float* out, const float* x, int n) override;
  void backward(const float* saved, float* dx, const float* dout, const float* x, int n) override;
  void row_sharded_grads(std::vector<TpContext::Span>& out) const override;

 private:
  NormConfig c_;
  NormWeights w_;
  kernels::Device& dev_;
  int64_t capacity_rows_;
};

}  // namespace troupe::model::layers
