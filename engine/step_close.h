// What closes a step, without actors: a training step's update decision once its
// gradient norm (and, with logging.on_spike acting, its loss) is known; its record and
// the position it moves the run to; what spike records and the straggler report need
// beyond the record; an evaluation's record. The coordinator turns messages into these
// calls and their results into messages (docs/runtime.md, "The coordinator").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "engine/rollback.h"
#include "engine/spike_guard.h"
#include "engine/step_ledger.h"
#include "engine/topology.h"
#include "messages/config.pb.h"
#include "metrics/spike_detector.h"
#include "metrics/step_record.h"
#include "optim/grad_clip.h"

namespace troupe::engine {

// A training step's update: clip and skip from the global gradient norm; with
// logging.on_spike acting, the spike guard's verdict on the step's loss and norm (the
// guard's windows advance); with ROLLBACK, the rollback, or why the run stops instead.
struct UpdateDecision {
  optim::ClipDecision clip;
  bool spike_dropped = false;  // dropped by the guard (the norm itself was finite)
  std::optional<std::variant<RollbackRequest, std::string>> rollback;
};
// `consumed_before`: the run's consumed samples before the step; `earlier_spikes`: the
// steps of the run's earlier rollbacks (the limit counts them).
UpdateDecision decide_update(const Config& c, const StepLedger& ledger, SpikeGuard& guard,
                             const data::BatchSource& train, int64_t consumed_before,
                             const std::vector<int64_t>& earlier_spikes);

// The record of a complete training step updated by `clip` at learning rate `lr`; moves
// `pos` past it (step, consumed samples, a blend's datasets, updates, epoch). `started`
// (Unix seconds): where the step's time runs from, the later of the previous training
// step's end and when this one went out. Throws std::logic_error when the loaders' and
// the last stages' token counts disagree or a shard applied another update.
metrics::StepRecord close_train_step(const StepLedger& ledger, const optim::ClipDecision& clip, double lr,
                                     const data::BatchSource& train, double started, TrainingPosition& pos);

// When a step ended: the last stage to apply its update (StageTiming::end_time, Unix
// seconds; stages in other processes read their own host's clock), or now.
double step_end_time(const StepLedger& ledger);

// What the coordinator knows of a training step beyond its record: microbatch losses
// and samples, each stage's and layer's gradient norm, the step's documents and its
// update-to-weight norms (spike records), every stage's op timings (straggler report).
struct StepExtras {
  metrics::StepDetail detail;
  std::vector<std::string> stage_paths;   // rank order
  std::vector<msg::StageTiming> timings;  // rank order
};
StepExtras step_extras(const StepLedger& ledger, const metrics::StepRecord& r, const Topology& topo,
                       int32_t microbatches, int32_t micro_batch_size, const data::BatchSource& train);

// The record of a complete evaluation after the run's position `pos`; with a blended
// validation set (`valid`), each dataset's loss. time_s and wall_time are the caller's.
metrics::EvalRecord close_eval(const StepLedger& ledger, const TrainingPosition& pos, int32_t micro_batch_size,
                               const data::BatchSource* valid);

}  // namespace troupe::engine
