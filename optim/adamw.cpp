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

AdamW::AdamW(kernels::Device& device, AdamWHyper hyper, std::vector<model::DecaySpan> spans,
             model::FlatRange range)
    : device_(device), hyper_(hyper), range_(range) {
  if (range.begin < 0 || range.end < range.begin)
    throw std::invalid_argument("AdamW: bad range [" + std::to_string(range.begin) + ", " +
                                std::to_string(range.end) + ")");
  int64_t covered = 0;
  for (const auto& s : spans) {
    const int64_t b = std::max(s.begin, range.begin), e = std::min(s.end, range.end);
    if (b < e) {
      pieces_.push_back({b, e, s.group});
      covered += e - b;
    }
  }
  if (covered != range.end - range.begin)
    throw std::invalid_argument("AdamW: the decay spans cover " + std::to_string(covered) + " of the " +
                                std::to_string(range.end - range.begin) + " elements of the range");
  m_ = device_.allocate(range.end - range.begin);
  v_ = device_.allocate(range.end - range.begin);
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
  for (const auto& p : pieces_) {
    a.weight_decay = p.group == model::DecayGroup::kDecay ? float(hyper_.weight_decay) : 0.0f;
    const int64_t local = p.begin - range_.begin;
    device_.adamw_update(params + p.begin, grads + p.begin, m() + local, v() + local, p.end - p.begin, a);
  }
  steps_ = t;
}

}  // namespace troupe::optim
