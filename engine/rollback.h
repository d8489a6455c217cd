// logging.on_spike ROLLBACK (docs/metrics.md, "Acting on a spike"), without actors: what
// a spike asks of a rollback and the checkpoint root moved back to the checkpoint resumed.
//
// The flow: the coordinator's spike guard judges step n a spike; decide_rollback()
// names the samples to skip (or why the run stops instead); the update of n is dropped
// and nothing is handed over ahead; once n closes, roll_back_checkpoints() keeps the
// newest complete checkpoint at or before n - rollback_steps and moves the later ones
// aside; the run's client (actors/runtime.cpp) stops the group, rolls its run state
// back (engine/run_state.h: the spike's samples skipped, the kept checkpoint resumed) and
// starts a new group. A fresh run told to skip the same samples from its start
// (data.skip_samples) trains on exactly the same samples in the same order, so both
// end bitwise equal (the skipped samples lie in the first epoch, past the checkpoint's
// position: nothing before them moves).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "data/batch_source.h"
#include "messages/config.pb.h"

namespace troupe::engine {

// What a spike at `spike_step` asks for.
struct RollbackRequest {
  int64_t spike_step = 0;
  int64_t first_position = 0;     // the spike step's first sample in the run's order (consumed before it)
  std::vector<int64_t> skip_ids;  // the samples at positions [first_position, + rollback_skip_samples), ascending
};

// Whether the spike at `spike_step`, whose global batch starts at position
// `consumed_before` of the run's order, rolls the run back: the request, or why the run
// stops instead (one sentence): more than logging.rollback_limit rollbacks with spikes
// within rollback_window_steps (`earlier_spikes`: the spike steps of the rollbacks so
// far), or samples to skip that reach past the first epoch.
std::variant<RollbackRequest, std::string> decide_rollback(const Config& c, const data::BatchSource& train,
                                                           int64_t spike_step, int64_t consumed_before,
                                                           const std::vector<int64_t>& earlier_spikes);

// The rollbacks a run recorded: the "rollback" lines of its metrics.jsonl at
// `metrics_path`, oldest first (none when the file is missing). A resumed run counts
// their spikes against logging.rollback_limit; a replay skips their samples. Throws
// metrics::MetricsError for a file that does not read.
struct RecordedRollback {
  int64_t spike_step = 0;
  std::vector<int64_t> skipped_samples;
};
std::vector<RecordedRollback> recorded_rollbacks(const std::string& metrics_path);

// The samples a rollback skips: logging.rollback_skip_samples, 0 meaning one global batch.
int64_t rollback_skip_count(const Config& c);

// What a rollback did to the checkpoint root.
struct RollbackDone {
  int64_t target_step = 0;   // the checkpoint the group starts from (0: from scratch)
  std::string target_dir;    // its directory ("" from scratch)
  std::string aside_dir;     // where the later step directories went ("" when none)
  std::vector<int64_t> moved_steps;
  std::vector<std::string> report;  // checkpoints passed over because they do not load
};

// Moves the checkpoint root (engine::checkpoint_root) back for a spike at `spike_step`:
// the newest checkpoint at or before spike_step - logging.rollback_steps that loads
// (strictly, counters checked) is kept and `latest` names it (no `latest` when none is
// found: the group starts from scratch); every step directory after it, complete or
// partial, is renamed into ROOT.rolled-back-SPIKE/ (nothing is deleted). Throws
// ckpt::CheckpointError naming the path when a rename or the `latest` write fails.
RollbackDone roll_back_checkpoints(const Config& c, int64_t spike_step);

}  // namespace troupe::engine
