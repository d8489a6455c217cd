#include "engine/optimizer_shard.h"

#include "optim/grad_clip.h"

namespace troupe::engine {

OptimizerShard::OptimizerShard(const Config& c, kernels::Device& device,
                               const model::ParameterRegistry& reg, model::FlatRange range,
                               bool counts_in_norm)
    : device_(device),
      norm_ranges_(reg.norm_ranges()),
      counts_in_norm_(counts_in_norm),
      adamw_(device, optim::AdamWHyper::from_config(c), reg.decay_spans(), range) {}

double OptimizerShard::norm_partial(const float* grads) const {
  if (!counts_in_norm_) return 0.0;
  return optim::sum_squares(device_, grads, norm_ranges_, adamw_.range());
}

void OptimizerShard::apply(float* params, const float* grads, double lr, double clip_factor) {
  adamw_.step(params, grads, lr, clip_factor);
}

}  // namespace troupe::engine
