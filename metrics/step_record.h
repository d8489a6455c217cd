// The records the coordinator fills and every metrics sink reads: the console, the
// JSON-lines file (metrics.jsonl) and the TensorBoard event file. One struct per kind
// of line, so that a field added here reaches every sink through its one formatter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::metrics {

// What one stage rank's device held at its highest during a step, by category
// (docs/metrics.md, "Memory"), in bytes; the five parts add up to peak(). Beside it the
// planner's saved-activation bytes for the stage (sched/activation_memory.h).
struct StageMemoryRecord {
  std::string stage;  // actor path, "stage/dp0/pp1/tp0"
  int64_t weights = 0, gradients = 0, optimizer_state = 0, activations = 0, scratch = 0;
  int64_t planned_activations = 0;
  int64_t peak() const { return weights + gradients + optimizer_state + activations + scratch; }
};

// One dataset of a blend in a step record: tokens are non-padding input tokens.
struct DatasetRecord {
  std::string prefix;
  int64_t samples = 0, tokens = 0;                    // this step's
  int64_t consumed_samples = 0, consumed_tokens = 0;  // the run's so far, this step's included
};
// The short name a blend's dataset goes by in TensorBoard tags: its prefix's last path
// component after its place in the blend ("0_web"), so that two never collide.
std::string dataset_tag(size_t index, const std::string& prefix);

// One optimizer update, successful or skipped (docs/numerics.md: "Loss of a step",
// "Clipping and skipped updates").
struct StepRecord {
  int64_t step = 0;              // update index, 1-based; skipped updates count
  int64_t consumed_samples = 0;  // samples read so far, this step's included (Megatron's counter)
  // Sum of per-token losses / loss-bearing tokens of the global batch. May be
  // non-finite on a skipped step.
  double loss = 0;
  double lr = 0;         // LR of this update (the one it would have used when skipped)
  double grad_norm = 0;  // global L2 norm before clipping; non-finite means skipped
  bool clipped = false;  // grad_norm > clip, gradients scaled by clip / grad_norm
  bool skipped = false;  // no weights changed; the LR schedule did not advance

  // Counts over this step's global batch (data::BatchCounts).
  int64_t input_tokens = 0;    // samples * seq_length, padding included
  int64_t loss_tokens = 0;     // loss-bearing predictions
  int64_t padding_tokens = 0;  // padding positions among the inputs

  // Wall time of the whole update, data to updated weights: from the previous step's end
  // (or from when this one went out, if later) to this one's end (docs/runtime.md).
  double step_time_s = 0;
  int64_t restarts = 0;    // restarts of the training group so far in this run
  // This step had completed once before a failure and was run again after the
  // restart from an older checkpoint.
  bool recomputed = false;
  double wall_time = 0;  // Unix seconds when the step finished: the last stage's update applied
  // FNV-1a 64 over the step's sorted sample IDs (sample_content_hash, spike_detector.h):
  // what a replay compares the samples by. Absent in files written before it existed.
  std::optional<uint64_t> samples_hash;
  // The data.skip_samples IDs this step's global batch passed over (in the unfiltered
  // order; data::BatchSource::skipped_in): with the step's own samples they account
  // for every position of the unfiltered sample order.
  std::vector<int64_t> skipped_samples;
  // Every stage rank's device memory at its peak in this step, in rank order. Empty in
  // files written before it existed.
  std::vector<StageMemoryRecord> stage_memory;
  // With a blend (data.blend): each dataset's part of this step and of the run so far,
  // in the blend's order (docs/data.md, "Blends"). Empty without one.
  std::vector<DatasetRecord> datasets;
};

// Throughput of a step: non-padding input tokens per second of step time. 0 when
// step_time_s is not positive. Every sink uses this one definition.
double tokens_per_second(const StepRecord& r);

// Non-padding input tokens of a step.
inline int64_t real_tokens(const StepRecord& r) { return r.input_tokens - r.padding_tokens; }

// What the run is, written once when it starts (and again after each restart).
struct StartupRecord {
  std::string config_path;  // the file the user passed ("" for the embedded default)
  std::string run_dir;
  int64_t parameters = 0;  // config::parameter_count
  int32_t data_parallel = 1, pipeline_parallel = 1, tensor_parallel = 1;
  int64_t global_batch_size = 0;
  int64_t seq_length = 0;
  int64_t microbatches_per_replica = 0;
  int64_t train_steps = 0;                   // full updates of the run
  std::optional<int64_t> resumed_from_step;  // set when loaded from a checkpoint
  std::vector<std::string> actor_paths;      // "stage/dp0/pp0/tp0", ...
  // The train split's sample IDs left out of the order: data.skip_samples with those
  // of the checkpoint resumed from (sorted).
  std::vector<int64_t> skip_samples;
  // The training blend (data.blend), each dataset's prefix and weight as configured;
  // empty without one (and then absent from metrics.jsonl).
  std::vector<std::pair<std::string, double>> blend;
  double wall_time = 0;
};

// One validation pass.
struct EvalRecord {
  int64_t step = 0;  // the update after which it ran
  int64_t consumed_samples = 0;
  double loss = 0;  // token-weighted over the whole validation set
  int64_t samples = 0;
  int64_t loss_tokens = 0;
  double time_s = 0;
  double wall_time = 0;
  // With a blend for validation: each dataset's own loss over its part of the set, in
  // the blend's order. Empty without one.
  struct Dataset {
    std::string prefix;
    double loss = 0;  // token-weighted over its loss-bearing predictions
    int64_t samples = 0, loss_tokens = 0;
  };
  std::vector<Dataset> datasets;
};

// A failure of an actor and what the supervisor did about it.
struct FailureRecord {
  int64_t step = 0;      // the step in flight when it failed
  std::string actor;     // actor path, e.g. "stage/dp1/pp0/tp0"
  std::string phase;     // "forward", "backward", "reduce", "optimizer", "checkpoint_write", ...
  std::string reason;    // the exit reason or exception text
  std::string action;    // "restart" or "stop"
  int64_t restarts = 0;  // restarts so far, this one included when action is "restart"
  // When action is "restart": the checkpoint step training resumes after (0: from scratch).
  std::optional<int64_t> resume_step;
  double wall_time = 0;
};

// The end of a run (also written on Ctrl-C and on giving up after failures).
struct RunSummary {
  std::string status;  // "completed", "interrupted", "failed"
  int64_t steps = 0;   // updates attempted (successful + skipped)
  int64_t skipped_steps = 0;
  int64_t clipped_steps = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_samples = 0;  // data.skip_samples IDs passed over by this process's steps
  int64_t input_tokens = 0;  // over the whole run
  int64_t loss_tokens = 0;
  int64_t padding_tokens = 0;
  double first_loss = 0;  // loss of the first step of the run
  double last_loss = 0;
  std::optional<double> last_eval_loss;
  double elapsed_s = 0;      // wall time from startup to the summary
  double train_time_s = 0;   // sum of step times
  int64_t restarts = 0;
  int64_t spikes = 0;        // spikes recorded (loss or gradient norm)
  int64_t rollbacks = 0;     // logging.on_spike ROLLBACK: times the run went back past a spike
  double wall_time = 0;
  std::string error;              // why the run stopped or failed ("" when it completed)
  std::string newest_checkpoint;  // the newest complete checkpoint's directory ("": none)
};

// Mean throughput of a run: non-padding input tokens / summed step time (0 if none).
double tokens_per_second(const RunSummary& s);

// Folds one step into a summary: counts, first/last loss, summed step time, and
// restarts (the largest seen). Leaves status, eval loss, elapsed time, spikes and
// wall time to the caller.
void accumulate(RunSummary& s, const StepRecord& r);

}  // namespace troupe::metrics
