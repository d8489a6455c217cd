// One run read back from its directory for comparisons (`supervisor compare`): the
// final timeline of its steps (the last line of each step number in metrics.jsonl,
// as docs/metrics.md tells readers to take them), its validation passes, and its
// spikes, with the tokens consumed and the time spent up to each point.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metrics/json.h"
#include "metrics/step_record.h"

namespace troupe::metrics {

// Where a run stood after a step (or at a validation pass): cumulative over the final
// timeline up to and including that step.
struct RunPosition {
  int64_t step = 0;
  int64_t input_tokens = 0;  // consumed: samples x seq_length, padding included
  int64_t loss_tokens = 0;   // loss-bearing predictions
  int64_t real_tokens = 0;   // input tokens less padding
  double train_s = 0;        // sum of step_time_s
  // Wall-clock seconds since the run started, each process counted from its startup
  // record (the time between a process's last line and the next one's start is left
  // out: a resumed run is not charged for the hours it was not running).
  double wall_s = 0;
};

struct HistoryStep {
  StepRecord record;
  RunPosition at;
};

struct HistoryEval {
  double loss = 0;
  RunPosition at;  // after the step it followed (step 0: before any)
};

struct RunHistory {
  std::string dir;
  std::vector<HistoryStep> steps;  // the final timeline, in step order
  std::vector<HistoryEval> evals;  // the last pass of each step number, in step order
  int64_t spikes = 0;              // distinct steps in spikes.jsonl
  int64_t skipped = 0, clipped = 0;
};

// Reads RUN_DIR/metrics.jsonl (and spikes.jsonl when there is one). Throws
// MetricsError naming the file when it is missing, malformed, or holds no step.
RunHistory load_run_history(const std::string& run_dir);

// The same from lines already read (the objects of metrics.jsonl and spikes.jsonl).
RunHistory run_history_from(const std::string& dir, const std::vector<Json>& metrics_lines,
                            const std::vector<Json>& spike_lines);

}  // namespace troupe::metrics
