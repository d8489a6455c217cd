#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace troupe::optim {

AdamWHyper AdamWHyper::from_config(const Config& c) {
  const auto& o = c.optimizer();
  return {o.beta1(), o.beta2(), o.eps(), o.weight_decay()};
}

double UpdateReadback::update_total() const {
  double s = 0;
  for (size_t i = 0; i < count; ++i) s += update_parts.get()[i];
  return s;
}

double UpdateReadback::weight_total() const {
  double s = 0;
  for (size_t i = 0; i < count; ++i) s += weight_parts.get()[i];
  return s;
}

AdamW::AdamW(kernels::Device& device, AdamWHyper hyper, std::vector<model::DecaySpan> spans,
             model::FlatRange range, const std::vector<model::FlatRange>& measured)
    : device_(device), hyper_(hyper), range_(range) {
  if (range.begin < 0 || range.end < range.begin)
    throw std::invalid_argument("AdamW: bad range [" + std::to_string(range.begin) + ", " +
                                std::to_string(range.end) + ")");
  for (size_t i = 0; i < measured.size(); ++i)
    if (measured[i].begin < range.begin || measured[i].end > range.end || measured[i].begin > measured[i].end ||
        (i > 0 && measured[i].begin < measured[i - 1].end))
      throw std::invalid_argument("AdamW: measured range " + std::to_string(i) + " [" +
                                  std::to_string(measured[i].begin) + ", " + std::to_string(measured[i].end) +
                                  ") is not sorted, disjoint and inside the range");
  int64_t covered = 0;
  // Offsets local to the range: the step hands params and grads from range.begin.
  std::vector<bool> is_measured;
  auto piece = [&](int64_t b, int64_t e, model::DecayGroup g, bool measured) {
    kernels::AdamWPiece p;
    p.begin = b - range.begin;
    p.end = e - range.begin;
    p.weight_decay = g == model::DecayGroup::kDecay ? float(hyper_.weight_decay) : 0.0f;
    pieces_.push_back(p);
    is_measured.push_back(measured);
    measured_pieces_ += measured ? 1 : 0;
  };
  for (const auto& s : spans) {
    const int64_t b = std::max(s.begin, range.begin), e = std::min(s.end, range.end);
    if (b >= e) continue;
    covered += e - b;
    // [b, e) cut at the measured ranges' ends.
    int64_t at = b;
    for (const auto& r : measured) {
      const int64_t mb = std::max(r.begin, at), me = std::min(r.end, e);
      if (mb >= me) continue;
      if (at < mb) piece(at, mb, s.group, false);
      piece(mb, me, s.group, true);
      at = me;
    }
    if (at < e) piece(at, e, s.group, false);
  }
  if (covered != range.end - range.begin)
    throw std::invalid_argument("AdamW: the decay spans cover " + std::to_string(covered) + " of the " +
                                std::to_string(range.end - range.begin) + " elements of the range");
  m_ = device_.allocate_as(kernels::MemoryCategory::kOptimizerState, range.end - range.begin);
  v_ = device_.allocate_as(kernels::MemoryCategory::kOptimizerState, range.end - range.begin);
  const size_t slots = std::max<size_t>(1, measured_pieces_);
  auto u = device_.allocate_host(slots * sizeof(double));
  update_host_ = {u, static_cast<double*>(u.get())};
  auto w = device_.allocate_host(slots * sizeof(double));
  weight_host_ = {w, static_cast<double*>(w.get())};
  // The measured pieces' sums, in piece order, into the slots update_readback() reads.
  size_t slot = 0;
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (is_measured[i]) {
      pieces_[i].update_sq = update_host_.get() + slot;
      pieces_[i].weight_sq = weight_host_.get() + slot;
      ++slot;
    }
}

void AdamW::step(float* params, const float* grads, double lr, double grad_scale) {
  const int64_t t = steps_ + 1;
  kernels::AdamWArgs a;
  a.lr = float(lr);
  a.beta1 = float(hyper_.beta1);
  a.beta2 = float(hyper_.beta2);
  a.eps = float(hyper_.eps);
  a.bias_correction1 = float(1.0 - std::pow(hyper_.beta1, double(t)));
  a.bias_correction2 = float(1.0 - std::pow(hyper_.beta2, double(t)));
  a.grad_scale = float(grad_scale);
  device_.adamw_update_pieces(params + range_.begin, grads + range_.begin, m(), v(), pieces_, a);
  steps_ = t;
}

}  // namespace troupe::optim
