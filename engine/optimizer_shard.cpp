#include "engine/optimizer_shard.h"

#include <algorithm>

namespace troupe::engine {

OptimizerShard::OptimizerShard(const Config& c, kernels::Device& device,
                               const model::ParameterRegistry& reg, model::FlatRange range,
                               bool counts_in_norm)
    : device_(device),
      counts_in_norm_(counts_in_norm),
      adamw_(device, optim::AdamWHyper::from_config(c), reg.decay_spans(), range) {
  if (counts_in_norm_) norm_parts_ = optim::parts_within(reg.norm_ranges(), range);
  auto block = device_.allocate_host(std::max<size_t>(1, norm_parts_.size()) * sizeof(double));
  norm_parts_host_ = {block, static_cast<double*>(block.get())};
}

void OptimizerShard::issue_norm_partial(const float* grads) {
  for (size_t i = 0; i < norm_parts_.size(); ++i) {
    const auto& p = norm_parts_[i];
    device_.sum_squares_to_host(norm_parts_host_.get() + i, grads + p.begin, p.end - p.begin);
  }
}

double OptimizerShard::norm_partial(const float* grads) {
  issue_norm_partial(grads);
  device_.synchronize();
  return norm_readback().total();
}

void OptimizerShard::apply(float* params, const float* grads, double lr, double clip_factor) {
  adamw_.step(params, grads, lr, clip_factor);
}

}  // namespace troupe::engine
