#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace troupe::optim {

std::vector<model::FlatRange> parts_within(const std::vector<model::FlatRange>& ranges, model::FlatRange within) {
  std::vector<model::FlatRange> parts;
  for (const auto& r : ranges) {
    const int64_t b = std::max(r.begin, within.begin), e = std::min(r.end, within.end);
    if (b < e) parts.push_back({b, e});
  }
  return parts;
}

double sum_squares(kernels::Device& device, const float* grads,
                   const std::vector<model::FlatRange>& ranges, model::FlatRange within) {
  double total = 0;
  for (const auto& p : parts_within(ranges, within)) total += device.sum_squares(grads + p.begin, p.end - p.begin);
  return total;
}

double NormReadback::total() const {
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += parts.get()[i];
  return sum;
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
