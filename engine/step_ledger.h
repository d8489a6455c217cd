// What one step's actors report to the coordinator, reduced in a fixed order: loss
// sums in (replica, microbatch) order, norm partials in rank order, counts in
// replica order. Arrival order never changes a result, so a run is bitwise
// reproducible however its threads interleave.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "engine/topology.h"
#include "messages/runtime.h"
#include "metrics/step_record.h"

namespace troupe::engine {

class StepLedger {
 public:
  StepLedger(const Topology& t, msg::StepKind kind, int64_t step, int32_t microbatches);

  // Each throws std::logic_error naming the report when it is a duplicate or
  // belongs to another step.
  void add(const msg::LossReport& r);
  void add(const msg::ReplicaCounts& r);
  void add(const msg::NormPartial& r);
  void add(const msg::StageDone& r);

  bool has_counts(int32_t dp) const { return dp >= 0 && size_t(dp) < counts_.size() && counts_[size_t(dp)]; }
  bool norms_complete() const { return norms_seen_ == int32_t(norms_.size()); }
  bool losses_complete() const { return losses_seen_ == int32_t(losses_.size()); }
  bool counts_complete() const { return counts_seen_ == int32_t(counts_.size()); }
  bool stages_complete() const { return stages_seen_ == int32_t(stages_.size()); }
  bool complete() const { return losses_complete() && counts_complete() && stages_complete(); }

  int64_t step() const { return step_; }
  msg::StepKind kind() const { return kind_; }

  // Sum of the norm partials in (dp, pp, tp) order.
  double total_sum_squares() const;
  // Each pipeline stage's sum of squares: its partials summed in (dp, tp) order
  // (spike records; the stages' sums add up to total_sum_squares up to rounding).
  std::vector<double> stage_sum_squares() const;
  // The norm partials' per-layer sums of squares added over the shards in rank order,
  // each layer where it first appears (the spike record's layer_grad_norms).
  std::vector<std::pair<std::string, double>> layer_sum_squares() const;
  // Sum of the microbatch loss sums in (dp, microbatch) order, and its tokens.
  double loss_sum() const;
  int64_t loss_tokens() const;
  // Counts of the whole global batch, and its sample IDs in replica order.
  data::BatchCounts counts() const;
  std::vector<int64_t> sample_ids() const;
  // Per-microbatch losses and loss tokens in (dp, microbatch) order (spike records).
  std::vector<double> microbatch_losses() const;
  std::vector<int64_t> microbatch_loss_tokens() const;
  // Per-microbatch segment sums in (dp, microbatch) order (the spike record's documents,
  // engine::document_losses).
  std::vector<std::vector<msg::SegmentLoss>> segment_losses() const;
  // The optimizer shards' update sums (StageDone::update) added in rank order: the
  // squares of ||delta W|| and ||W|| over every parameter once.
  msg::UpdateSums update_sums() const;
  // Train: "" when every rank's optimizer shard applied `decided` (its StageDone::applied,
  // every field exactly), else a line naming the first rank that did not and both updates.
  std::string applied_mismatch(const msg::UpdateCommand& decided) const;
  // Timings of every stage in rank order.
  std::vector<msg::StageTiming> timings() const;
  // Every stage's memory peak (StageTiming::memory) in rank order, named by its path:
  // the step record's stage_memory.
  std::vector<metrics::StageMemoryRecord> stage_memory() const;

  // What is still missing, for the watchdog's report ("loss dp1/mb3, stage stage/dp0/pp1/tp0").
  std::string missing() const;

 private:
  Topology topo_;
  msg::StepKind kind_;
  int64_t step_;
  int32_t microbatches_;
  std::vector<std::optional<msg::LossReport>> losses_;       // [dp * m + mb]
  std::vector<std::optional<msg::ReplicaCounts>> counts_;    // [dp]
  std::vector<std::optional<double>> norms_;                 // [rank index]
  std::vector<std::vector<std::pair<std::string, double>>> layer_norms_;  // [rank index]
  std::vector<std::optional<msg::StageTiming>> stages_;      // [rank index]
  std::vector<msg::UpdateSums> updates_;                     // [rank index]
  std::vector<msg::UpdateCommand> applied_;                  // [rank index]
  int32_t losses_seen_ = 0, counts_seen_ = 0, norms_seen_ = 0, stages_seen_ = 0;
};

}  // namespace troupe::engine
