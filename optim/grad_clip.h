// The global gradient norm and what it decides (docs/numerics.md, "Clipping and
// skipped updates"): one L2 norm
// over every parameter shard on every rank, each parameter counted once; scale all
// gradients by clip / norm when norm > clip (clip 0 disables clipping); skip the
// update when the norm is not finite.
//
// Partial sums of squares (doubles) from any split of the parameters add up to the
// total, so a distributed optimizer sums its shards' partials (in rank order, for
// determinism) and calls decide() once.
#pragma once

#include <memory>
#include <vector>

#include "kernels/device.h"
#include "model/param_registry.h"

namespace troupe::optim {

// Sum of squares of grads over the parts of `ranges` inside `within` (the flat
// range a shard owns; the whole buffer when omitted), range by range in order.
double sum_squares(kernels::Device& device, const float* grads,
                   const std::vector<model::FlatRange>& ranges,
                   model::FlatRange within = {0, INT64_MAX});

// The parts of `ranges` inside `within`, in order: the ranges sum_squares adds.
std::vector<model::FlatRange> parts_within(const std::vector<model::FlatRange>& ranges, model::FlatRange within);

// Partial sums of squares read back into host memory without waiting
// (Device::sum_squares_to_host), one per part: valid inside a device when_done fn
// issued after them.
struct NormReadback {
  std::shared_ptr<const double> parts;
  size_t count = 0;
  // Their sum, part by part in order: the same bits as sum_squares over those parts.
  double total() const;
};

struct ClipDecision {
  double norm = 0;      // pre-clip global L2 norm
  bool skip = false;    // norm is not finite: no update, the LR schedule does not advance
  bool clipped = false; // norm > clip > 0
  double factor = 1;    // multiply every gradient by this (clip / norm when clipped)
};

ClipDecision decide(double total_sum_squares, double clip_grad);

}  // namespace troupe::optim
