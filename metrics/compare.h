// Comparing runs the way the seed does (issue 26): at equal tokens for validation loss,
// and at equal validation loss for tokens and elapsed time. The runs are aligned by
// consumed tokens (input tokens, or loss-bearing ones); `supervisor compare` prints
// format_comparison. docs/metrics.md, "Comparing runs".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "metrics/run_history.h"

namespace troupe::metrics {

enum class TokenAxis { Input, LossBearing };

struct CompareOptions {
  TokenAxis axis = TokenAxis::Input;
  // Rows of the equal-tokens table at most (evenly spaced over the common token
  // counts, the last one always kept).
  int max_rows = 12;
};

// One run's line of the summary table.
struct RunRow {
  std::string name;
  int64_t steps = 0;
  int64_t tokens = 0;  // on the chosen axis, at the last step
  double final_loss = 0;
  std::optional<double> final_eval;  // none without a validation pass
  double tokens_per_s = 0;           // non-padding input tokens per second of step time
  double train_s = 0, wall_s = 0;
  int64_t spikes = 0, skipped = 0, clipped = 0;
};

// Validation loss of one run at a token count: measured there, or interpolated
// linearly (in tokens) between the run's two passes around it.
struct EvalAt {
  double loss = 0;
  bool interpolated = false;
};

// The first validation pass of a run at or below a target loss.
struct Reach {
  int64_t tokens = 0;
  double wall_s = 0;
  int64_t step = 0;
};

struct Comparison {
  TokenAxis axis = TokenAxis::Input;
  std::vector<RunRow> runs;
  // Token counts every run's validation passes span (each a pass of at least one run).
  std::vector<int64_t> grid;
  std::vector<std::vector<std::optional<EvalAt>>> eval_at;  // [grid row][run]
  // For each run with a validation pass (the target), its final validation loss and
  // where each run first reached it.
  struct Target {
    size_t run = 0;
    double loss = 0;
    std::vector<std::optional<Reach>> reach;  // [run]
  };
  std::vector<Target> targets;
};

Comparison compare_runs(const std::vector<RunHistory>& runs, const CompareOptions& options = {});

// The tables, as `supervisor compare` prints them (docs/metrics.md shows one).
std::string format_comparison(const Comparison& c);

}  // namespace troupe::metrics
