// What each dataset of a blend (data.blend) has given the run: the per-dataset part of
// the training position, carried through checkpoints and into every step record
// (docs/data.md, "Blends"). Samples per dataset are a pure function of
// consumed_samples (the blend's rule); tokens are summed step by step and stored in the
// manifest, or counted afresh from the order when a resumed position lacks them.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch_source.h"
#include "messages/runtime.h"
#include "engine/checkpointing.h"
#include "metrics/step_record.h"

namespace troupe::engine {

// The per-dataset position at pos.consumed_samples: the resumed one where it agrees
// with `train`'s blend (same prefixes, same sample counts), else counted from the
// order (a log line says why). Empty without a blend.
std::vector<TrainingPosition::Dataset> blend_position(const data::BatchSource& train, const TrainingPosition& pos);

// Advances pos.datasets by the step of `count` samples starting at `consumed_before`
// and returns the step's per-dataset records (empty without a blend).
std::vector<metrics::DatasetRecord> advance_blend(const data::BatchSource& train, TrainingPosition& pos,
                                                  int64_t consumed_before, int64_t count);

// Each dataset's loss over an evaluation of a blended validation set, from the last
// stages' sums by packed segment (engine/document_losses.h: summed per document in
// the global batch's order, then per dataset in document order, the same in every
// layout). Empty without a blend.
std::vector<metrics::EvalRecord::Dataset> eval_dataset_losses(
    const std::vector<std::vector<msg::SegmentLoss>>& segments, const std::vector<int64_t>& sample_ids, int rows,
    const data::BatchSource& valid);

}  // namespace troupe::engine
