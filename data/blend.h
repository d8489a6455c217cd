// Which dataset each position of a blend's sample order comes from: Megatron's
// BlendedDataset rule, exactly (megatron/core/datasets/helpers.cpp,
// build_blending_indices; docs/data.md, "Blends").
//
// The weights are normalized as megatron-core does it, twice (the builder's
// normalize, then BlendedDataset's own): w / sum(w) in float64 with numpy's pairwise
// summation. Position i (0-based) goes to the dataset whose share is furthest behind
// its weight: the first d maximizing  w_d * max(i, 1) - taken_d(i),  where taken_d(i)
// counts the positions before i that went to d. The rule is sequential but does not
// depend on how long the order is, so the order of any length is a prefix of every
// longer one; this class extends its table on demand. The position inside dataset d
// of position i is taken_d(i) (Megatron's dataset_sample_index).
//
// Megatron builds each dataset's own index with ceil(ceil(N w_d) (1 + 0.005)) samples
// for a blend of N samples and fails when the rule asks for more (its size margin);
// troupe's per-dataset orders run through as many epochs as needed, so
// megatron_dataset_sizes() only reports what Megatron would build.
//
// Thread-safe: the table grows under a lock; every BlendOrder of the same weights in a
// process shares one (the run's loaders, coordinator and evaluation read one order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe::data {

// numpy.sum of a float64 array (pairwise summation, blocks of 8 below 128 items).
double numpy_sum(const std::vector<double>& v);
// megatron.core.datasets.utils.normalize: w / numpy.sum(w).
std::vector<double> megatron_normalize(const std::vector<double>& weights);

class BlendOrder {
 public:
  // Raw weights, each finite and > 0 (checked by the caller, which names the field).
  explicit BlendOrder(const std::vector<double>& weights);

  int datasets() const;
  // The weights the rule uses (normalized twice).
  const std::vector<double>& weights() const;
  // The dataset of position i.
  int dataset_at(int64_t position) const;
  // Positions before `position` that went to each dataset (taken_d(position)).
  std::vector<int64_t> taken_before(int64_t position) const;
  // The dataset of position i and its place inside that dataset's order.
  struct Choice {
    int dataset = 0;
    int64_t index = 0;
  };
  Choice choice_at(int64_t position) const;
  // The first position whose choice is the (count + 1)-th of `dataset`: positions
  // before it take at most `count` samples of the dataset.
  int64_t first_position_beyond(int dataset, int64_t count) const;
  // What megatron-core builds per dataset for a blend of `samples` samples:
  // ceil(ceil(samples * w_d) * (1 + surplus)), w normalized once.
  std::vector<int64_t> megatron_dataset_sizes(int64_t samples, double surplus = 0.005) const;

  struct Table;  // the choices so far (blend.cpp); one per blend in a process, shared

 private:
  std::vector<double> raw_;
  std::vector<double> weights_;
  std::shared_ptr<Table> table_;
};

// What `supervisor plan` prints of a blend: each dataset's weight as given and as the
// rule uses it, the samples it gives to `samples` positions and its share of them, and
// what megatron-core would build for it.
struct BlendEntry {
  std::string prefix;
  double weight = 1;
};
std::string describe_blend(const std::string& name, const std::vector<BlendEntry>& datasets, int64_t samples);

}  // namespace troupe::data
