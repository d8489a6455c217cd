// A step's losses by document, for the spike record (docs/metrics.md, "Spikes") and
// `supervisor replay --dump` (replay/replay_dump.h), computed one way for both. A
// document is the dataset sequence a packed segment reads: (dataset index in the
// blend, 0 without one; its sequence index in that dataset's .idx), named from the sample ID by
// data::BatchSource::pieces_of (segment k of a row is piece k of its window,
// data/packing.h). Each loss-bearing prediction is charged to the document of its
// input token.
//
// What is bitwise and what is not: a segment's sum adds its positions' per-token losses
// in token order in double from 0, as model::sum_token_losses adds a microbatch's (the
// masked positions add their 0). So where a microbatch is one segment (one row holding
// one piece) the segment's sum is the microbatch's loss sum, bit for bit; elsewhere the
// segments of a microbatch add up to its sum only to rounding (another grouping of the
// same terms). A document's sum adds its segments in the order of the global batch
// (sample position, then segment), which is the same in every DP/PP/TP layout: the
// same per-token losses give the same document sums, bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "data/batch_source.h"
#include "messages/runtime.h"
#include "metrics/spike_detector.h"

namespace troupe::engine {

// The segment sums of one microbatch from its per-token losses (host memory, [B*T]
// row-major, 0 where the loss mask is 0): every segment with at least one loss-bearing
// token, in (row, segment) order.
std::vector<msg::SegmentLoss> segment_losses(const float* token_losses, const data::Microbatch& mb);

// The documents of one global batch. segments[i]: microbatch i's segment sums, and
// sample_ids[i * rows + r] the sample of its row r, both in assignment order
// (replica-major, microbatch, row: the global batch's order, data/batch_source.h).
// Returned in (dataset, document) order, each with its samples (in batch order, each
// once), loss sum and loss-bearing tokens. Throws std::invalid_argument naming the
// microbatch when a segment or row is not in its sample's window.
std::vector<metrics::DocumentLoss> document_losses(const std::vector<std::vector<msg::SegmentLoss>>& segments,
                                                   const std::vector<int64_t>& sample_ids, int rows,
                                                   const data::BatchSource& src);

}  // namespace troupe::engine
