// AdamW over a contiguous range of a stage's flat buffers (docs/numerics.md, "AdamW"):
//   g = grad * clip_factor;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p * (1 - lr * wd) - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// with wd = optimizer.weight_decay for the decay group and 0 for the no-decay group
// (biases and 1-D parameters; model/param_registry.h).
//
// One object owns the Adam moments m, v (fp32, device memory) and the step counter t
// for the elements [range.begin, range.end) of the stage's flat parameter layout.
// The whole range is an unsharded optimizer; a slice is one distributed-optimizer
// shard. The same arithmetic runs either way, element by element, so shards of a
// range reproduce the unsharded update exactly.
//
// The parameters it updates are the fp32 master weights. On the CPU that is the
// model's own parameter buffer; a GPU shard keeps an fp32 master copy of its slice
// and passes that here.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/param_registry.h"

namespace troupe::optim {

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  static AdamWHyper from_config(const Config& c);
};

// The sums of one update over the measured elements (AdamW's `measured`), one part per
// call of the fused kernel, in host memory from the device's allocate_host: read them
// inside a device().when_done fn issued after the step.
struct UpdateReadback {
  std::shared_ptr<const double> update_parts, weight_parts;
  size_t count = 0;
  // Sum of (w_after - w_before)^2 and of w_before^2 over the parts, part by part in order.
  double update_total() const;
  double weight_total() const;
};

class AdamW {
 public:
  // spans: the decay groups of the whole flat layout (ParameterRegistry::decay_spans());
  // range: the elements this object updates; measured: the flat ranges (inside range,
  // sorted, disjoint) whose update and weights step() also sums for the
  // update-to-weight ratio (Device::adamw_update_norms; the update itself is the same
  // bits either way).
  AdamW(kernels::Device& device, AdamWHyper hyper, std::vector<model::DecaySpan> spans,
        model::FlatRange range, const std::vector<model::FlatRange>& measured = {});

  // One update of params[range] from grads[range] (both pointers to the START of the
  // flat buffers), with learning rate lr and every gradient multiplied by grad_scale
  // (the clip factor) first. Advances the step counter. Callers skip the call
  // entirely for a skipped update (non-finite gradient norm).
  void step(float* params, const float* grads, double lr, double grad_scale = 1.0);
  // The measured sums of the last step(), without waiting (see UpdateReadback).
  UpdateReadback update_readback() const { return {update_host_, weight_host_, measured_pieces_}; }

  int64_t steps() const { return steps_; }
  void set_steps(int64_t t) { steps_ = t; }  // restoring a checkpoint
  model::FlatRange range() const { return range_; }
  const AdamWHyper& hyper() const { return hyper_; }

  // Moments of the range: element i belongs to flat index range().begin + i.
  float* m() { return m_.f32(); }
  const float* m() const { return m_.f32(); }
  float* v() { return v_.f32(); }
  const float* v() const { return v_.f32(); }

 private:
  kernels::Device& device_;
  AdamWHyper hyper_;
  // The spans clipped to range_, in layout order, cut where a measured range begins or
  // ends (the update is element by element, so the cuts change no value); offsets from
  // range_.begin, a measured piece's sums into its slot of update_host_ / weight_host_.
  // One device call updates them all (Device::adamw_update_pieces).
  std::vector<kernels::AdamWPiece> pieces_;
  size_t measured_pieces_ = 0;
  std::shared_ptr<double> update_host_, weight_host_;  // [max(1, measured_pieces_)] each
  model::FlatRange range_;
  kernels::Buffer m_, v_;
  int64_t steps_ = 0;
};

}  // namespace troupe::optim
