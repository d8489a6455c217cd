// One distributed-optimizer shard, without actors: the AdamW state (fp32 moments,
// step counter) of the flat range of one stage's parameters that this data-parallel
// rank owns, its share of the global gradient norm, and the update. On the CPU the
// fp32 master weights are the stage's own parameter buffer (the shard updates its
// range in place); a GPU shard will keep a separate fp32 master copy.
#pragma once

#include "kernels/device.h"
#include "model/param_registry.h"
#include "optim/adamw.h"

namespace troupe::engine {

class OptimizerShard {
 public:
  // range: the elements this shard owns; counts_in_norm: whether its gradients are
  // part of the global norm (false for the replicas of an unsharded optimizer, whose
  // rank 0 counts for all of them).
  OptimizerShard(const Config& c, kernels::Device& device, const model::ParameterRegistry& reg,
                 model::FlatRange range, bool counts_in_norm);

  // Sum of squares of the gradients this shard counts in the global norm (grads
  // points at the start of the stage's flat gradient buffer).
  double norm_partial(const float* grads) const;

  // AdamW on the range with the coordinator's learning rate and clip factor.
  void apply(float* params, const float* grads, double lr, double clip_factor);

  optim::AdamW& adamw() { return adamw_; }
  kernels::Device& device() { return device_; }
  const optim::AdamW& adamw() const { return adamw_; }
  model::FlatRange range() const { return adamw_.range(); }

 private:
  kernels::Device& device_;
  std::vector<model::FlatRange> norm_ranges_;
  bool counts_in_norm_;
  optim::AdamW adamw_;
};

}  // namespace troupe::engine
