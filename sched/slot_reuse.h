// How many activation slots each model chunk of a stage needs, proven from the
// schedule's op lists rather than assumed (used for the interleaved schedule, whose
// wrap-around between the last and the first stage defeats the simple rule of
// sched/activation_memory.h).
//
// A chunk's slots are used round robin: microbatch j of chunk c lives in slot j mod S.
// The forward of j rewrites what microbatch j - S left in that slot:
//   - its saved activations: the stage's own backward of j - S (under the split
//     backward, ZB_H1: its weight pass, the last op that reads them) must have run before;
//   - its output, which the destination op of that forward (op_destination: the next
//     virtual stage's forward) reads when it starts;
// and the backward of j rewrites the input gradient that the backward of j - S left,
// which the destination op of that backward (the previous virtual stage's backward)
// reads when it starts. Neighbours in one process hand each other pointers, so the
// reuse is safe only when each reader's op happens before the rewriting op in EVERY
// execution the waits allow: by its stage's order and the messages between stages
// (the op that receives a value runs after the op that sent it). The check computes
// that happens-before relation exactly (vector clocks over the op lists) and returns,
// per chunk, the fewest slots, at least the chunk's peak in flight, for which every
// reuse is safe.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/pipeline_schedule.h"

namespace troupe::sched {

// Slots per chunk of stage `stage` (entry c for chunk c; at most m). The schedule must
// have passed the verifier (every op runs exactly once, no deadlock); throws
// std::invalid_argument otherwise.
std::vector<int32_t> chunk_activation_slots(const PipelineSchedule& s, int32_t stage);

// Most microbatches of chunk `chunk` forwarded and not yet backwarded on one stage
// (with weight passes in the list: whose weight pass has not run).
int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops, int32_t chunk);

}  // namespace troupe::sched
