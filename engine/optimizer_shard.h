// One distributed-optimizer shard, without actors: the AdamW state (fp32 moments,
// step counter) of the flat range of one stage's parameters that this data-parallel
// rank owns, its share of the global gradient norm, and the update. On the CPU the
// fp32 master weights are the stage's own parameter buffer (the shard updates its
// range in place); a GPU shard will keep a separate fp32 master copy.
#pragma once

#include "kernels/device.h"
#include "model/param_registry.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace troupe::engine {

class OptimizerShard {
 public:
  // range: the elements this shard owns; counts_in_norm: whether its gradients are
  // part of the global norm (false for the replicas of an unsharded optimizer, whose
  // rank 0 counts for all of them).
  OptimizerShard(optim::AdamWHyper hyper, kernels::Device& device, const model::ParameterRegistry& reg,
                 model::FlatRange range, bool counts_in_norm);

  // Sum of squares of the gradients this shard counts in the global norm (grads
  // points at the start of the stage's flat gradient buffer). Waits for the device.
  double norm_partial(const float* grads);
  // The same without waiting: issues the sums into host memory, and norm_readback()
  // adds them up inside a device().when_done fn issued after this. One read-back is
  // in flight at a time (the next step's comes after the update, after the last read).
  void issue_norm_partial(const float* grads);
  optim::NormReadback norm_readback() const { return {norm_parts_host_, norm_parts_.size()}; }
  // The same sums per layer, for the spike record (issued with the norm's, read back
  // the same way): one per entry of norm_part_layers(), the layer_label of its tensors.
  optim::NormReadback layer_readback() const { return {layer_parts_host_, layer_parts_.size()}; }
  const std::vector<std::string>& norm_part_layers() const { return norm_part_layers_; }

  // AdamW on the range with the coordinator's learning rate and clip factor, fused with
  // the sums of the update-to-weight ratio over the elements this shard counts in the
  // global norm (the update's bits are those of a plain AdamW step).
  void apply(float* params, const float* grads, double lr, double clip_factor);
  // The sums of the last apply(), without waiting: read them inside a device().when_done
  // fn issued after it (the next apply comes after that read: one step at a time).
  optim::UpdateReadback update_readback() const { return adamw_.update_readback(); }

  optim::AdamW& adamw() { return adamw_; }
  kernels::Device& device() { return device_; }
  const optim::AdamW& adamw() const { return adamw_; }
  model::FlatRange range() const { return adamw_.range(); }
  bool counts_in_norm() const { return counts_in_norm_; }

 private:
  kernels::Device& device_;
  bool counts_in_norm_;
  optim::AdamW adamw_;
  // The parts of the norm ranges inside this shard's range (none when it does not
  // count in the norm), and one double of host memory per part for their sums.
  std::vector<model::FlatRange> norm_parts_;
  std::shared_ptr<double> norm_parts_host_;
  std::vector<model::FlatRange> layer_parts_;  // the norm parts split by layer
  std::shared_ptr<double> layer_parts_host_;
  std::vector<std::string> norm_part_layers_;
  // Per norm part: the ends of its layer parts, relative to the part's start (they tile
  // it), and its first layer part: both sums come from one read of the gradients.
  std::vector<std::vector<int64_t>> layer_ends_;
  std::vector<size_t> first_layer_;
};

// The layer a parameter tensor belongs to, for per-layer gradient norms: "h.3" for
// GPT-2's "h.3.attn.c_attn.weight", "layers.3" for a Llama's
// "model.layers.3.self_attn.q_proj.weight", else the name without ".weight" / ".bias"
// ("wte", "ln_f", "model.norm", "lm_head").
std::string layer_label(const std::string& tensor_name);

}  // namespace troupe::engine
