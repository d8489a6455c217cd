#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace troupe::optim {

double sum_squares(kernels::Device& device, const float* grads,
                   const std::vector<model::FlatRange>& ranges, model::FlatRange within) {
  double total = 0;
  for (const auto& r : ranges) {
    const int64_t b = std::max(r.begin, within.begin), e = std::min(r.end, within.end);
    if (b < e) total += device.sum_squares(grads + b, e - b);
  }
  return total;
}

ClipDecision decide(double total_sum_squares, double clip_grad) {
  ClipDecision d;
  d.norm = std::sqrt(total_sum_squares);
  if (!std::isfinite(d.norm)) {
    d.skip = true;
    return d;
  }
  if (clip_grad > 0 && d.norm > clip_grad) {
    d.clipped = true;
    d.factor = clip_grad / d.norm;
  }
  return d;
}

}  // namespace troupe::optim
