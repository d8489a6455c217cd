#include "engine/optimizer_shard.h"

#include <algorithm>
#include <stdexcept>

namespace troupe::engine {

OptimizerShard::OptimizerShard(optim::AdamWHyper hyper, kernels::Device& device,
                               const model::ParameterRegistry& reg, model::FlatRange range,
                               bool counts_in_norm)
    : device_(device),
      counts_in_norm_(counts_in_norm),
      // The update and weight sums over the elements the norm counts (none when this
      // shard counts in no norm): each parameter once across replicas and stages.
      adamw_(device, hyper, reg.decay_spans(), range,
             counts_in_norm ? optim::parts_within(reg.norm_ranges(), range) : std::vector<model::FlatRange>{}) {
  if (counts_in_norm_) norm_parts_ = optim::parts_within(reg.norm_ranges(), range);
  // The norm parts cut at tensor boundaries and joined again per layer: summed apart
  // from the norm's own parts (whose spans cross layers), so the norm keeps its bits.
  for (const auto& p : norm_parts_) {
    first_layer_.push_back(layer_parts_.size());
    for (const auto& t : reg.tensors()) {
      const int64_t b = std::max(p.begin, t.offset), e = std::min(p.end, t.offset + t.numel);
      if (b >= e) continue;
      std::string label = layer_label(t.name);
      if (!layer_parts_.empty() && norm_part_layers_.back() == label && layer_parts_.back().end == b)
        layer_parts_.back().end = e;
      else {
        layer_parts_.push_back({b, e});
        norm_part_layers_.push_back(std::move(label));
      }
    }
    auto& ends = layer_ends_.emplace_back();
    for (size_t i = first_layer_.back(); i < layer_parts_.size(); ++i) ends.push_back(layer_parts_[i].end - p.begin);
    if (ends.empty() || ends.back() != p.end - p.begin || layer_parts_[first_layer_.back()].begin != p.begin)
      throw std::logic_error("OptimizerShard: the layer parts of a norm part do not tile it");
  }
  auto block = device_.allocate_host(std::max<size_t>(1, norm_parts_.size()) * sizeof(double));
  norm_parts_host_ = {block, static_cast<double*>(block.get())};
  auto layers = device_.allocate_host(std::max<size_t>(1, layer_parts_.size()) * sizeof(double));
  layer_parts_host_ = {layers, static_cast<double*>(layers.get())};
}

std::string layer_label(const std::string& name) {
  // "PREFIX<digits>." starting at `at`: the label is PREFIX<digits>.
  auto numbered = [&](size_t at, size_t prefix) -> std::string {
    const size_t digits = at + prefix, end = name.find('.', digits);
    if (end == std::string::npos || end == digits) return {};
    for (size_t k = digits; k < end; ++k)
      if (name[k] < '0' || name[k] > '9') return {};
    return name.substr(at, end - at);
  };
  if (name.rfind("h.", 0) == 0)
    if (auto l = numbered(0, 2); !l.empty()) return l;
  if (const auto at = name.find("layers."); at != std::string::npos)
    if (auto l = numbered(at, 7); !l.empty()) return l;
  for (const std::string suffix : {".weight", ".bias"})
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return name.substr(0, name.size() - suffix.size());
  return name;
}

void OptimizerShard::issue_norm_partial(const float* grads) {
  // Each norm part and its layer parts in one read of the gradients (on a 124M model two
  // reads cost 25 ms a step more; docs/performance.md).
  for (size_t i = 0; i < norm_parts_.size(); ++i) {
    const auto& p = norm_parts_[i];
    device_.sum_squares_split_to_host(norm_parts_host_.get() + i, layer_parts_host_.get() + first_layer_[i],
                                      grads + p.begin, p.end - p.begin, layer_ends_[i]);
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
