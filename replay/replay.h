// Replaying a recorded run (`supervisor replay`, docs/metrics.md "Replay"): the steps
// after one of its checkpoints recomputed with the run's saved config and data, in a
// scratch directory, and compared bit for bit with what metrics.jsonl recorded; or,
// with a counterfactual change (samples or documents skipped, the LR scaled, another
// clip or any --set), the same steps under the change beside the recorded ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay_dump.h"
#include "messages/config.pb.h"
#include "metrics/step_record.h"

namespace troupe::replay {

struct ReplayOptions {
  std::string run_dir;
  int64_t step = 0;                 // N: the last step recomputed
  std::optional<int64_t> from;      // the checkpoint's step (< N); default: the newest before N
  // Scratch run directory; default RUN_DIR/replay/run_<from>_<N> (changed_<from>_<N>
  // for a counterfactual).
  std::string out_dir;
  // Counterfactual changes (any of them makes the replay a counterfactual one).
  std::vector<int64_t> skip_samples;    // added to data.skip_samples
  std::vector<int64_t> skip_documents;  // train sequences (.idx indices): every sample reading one is skipped
  double lr_scale = 1.0;                // optimizer.lr and optimizer.min_lr scaled
  std::optional<double> clip;           // optimizer.clip_grad
  std::vector<std::string> sets;        // --set PATH=VALUE, applied last
  int timeout_s = 3600;                 // the recomputation's upper bound
  // The placement it recomputes on (parallel.physical_replicas; not a change: the numbers
  // depend on the logical layout alone, docs/layout.md). -1: every logical replica on one
  // physical replica where the run's layout allows it (the distributed optimizer on the
  // CPU), else the run's own; 0: the run's own.
  int physical_replicas = -1;
  // Also write step N's documents with their losses to RUN_DIR/replay/step_N
  // (replay/replay_dump.h); faithful replays only.
  bool dump = false;

  bool counterfactual() const {
    return !skip_samples.empty() || !skip_documents.empty() || lr_scale != 1.0 || clip || !sets.empty();
  }
};

// The first quantity of a step whose recomputed value is not bitwise the recorded one.
struct ReplayDifference {
  int64_t step = 0;
  std::string quantity;  // "consumed_samples", "samples", "loss_tokens", "grad_norm", "loss", "lr"
  std::string recorded, replayed;
};

struct ReplayStep {
  metrics::StepRecord recorded, replayed;
};

struct ReplayResult {
  int64_t from_step = 0;           // 0: recomputed from the initial weights
  std::string checkpoint;          // its directory ("" from step 0)
  std::string out_dir;
  std::string placement;  // the recomputation's (config::placement_text)
  bool counterfactual = false;
  std::vector<std::string> changes;  // the counterfactual changes, as given
  std::vector<ReplayStep> steps;     // from_step + 1 .. N
  std::optional<ReplayDifference> first_difference;  // faithful replays only
  bool samples_compared = false;     // metrics.jsonl recorded samples_hash for every step
  std::optional<StepDump> dump;      // with --dump
};

// The config the steps after `from_step` ran with, made into a replay's: the run's
// RUN_DIR/config.textproto, writing to `out_dir` only (logging.run_dir, checkpoint.dir,
// no saves), resuming from `checkpoint` ("" = fresh), stopping after step N with the
// LR schedule unchanged (decay_samples pinned to the run's), no faults, no evaluation,
// on the placement of ReplayOptions::physical_replicas;
// with dump, a checkpoint of step N - 1 saved when the replay starts before it.
// Throws std::invalid_argument / config::ConfigError naming what is wrong.
Config replay_config(const Config& run, const ReplayOptions& o, const std::string& checkpoint, int64_t from_step);

// Recomputes and compares. Throws (naming the file or option) when the run directory,
// its checkpoints or metrics.jsonl cannot supply the steps, or when the recomputation
// does not complete.
ReplayResult replay_run(const ReplayOptions& o);

// The report: a header, one line per step (recorded and replayed loss and gradient
// norm, and whether the step is bitwise equal), then the verdict.
std::string format_replay(const ReplayResult& r);

}  // namespace troupe::replay
