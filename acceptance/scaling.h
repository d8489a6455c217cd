// The scaling sweep (behind `supervisor scaling`, docs/acceptance.md, part "Fourth"): the same
// global batch at several data-parallel sizes, each run warmed up first, steady
// tokens/s measured over a stated window, and the table of speed-up and scaling
// efficiency of each size against the previous one (sched::scaling_step), as the
// article reads 512 -> 1,024 -> 2,560 -> 5,120 GPUs.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "acceptance/measure.h"
#include "messages/config.pb.h"
#include "metrics/json.h"
#include "sched/planner.h"

namespace troupe::acceptance {

struct ScalingRow {
  int64_t ranks = 0;          // DP x PP x TP: what the article counts as GPUs
  int64_t data_parallel = 0;
  int64_t microbatches = 0;   // per replica, for the same global batch
  std::optional<double> tokens_per_s;  // empty: not measured
  // Against the previous measured row (empty for the first).
  std::optional<sched::ScalingStep> step;
  std::optional<WindowThroughput> window;
};

// Fills each row's step from its tokens_per_s and the previous measured row's.
void compute_steps(std::vector<ScalingRow>& rows);
// The table: ranks, DP, microbatches, tokens/s, speed-up ("1.78x"), efficiency ("89%"),
// median step time. `rank_label` heads the first column ("GPUs", "ranks").
std::string format_scaling_table(const std::vector<ScalingRow>& rows, const std::string& rank_label);

// "1,2,4" -> {1, 2, 4}; throws std::invalid_argument naming --dp and the bad item
// (not a positive integer, not ascending).
std::vector<int> parse_dp_list(const std::string& text);

struct ScalingOptions {
  std::vector<int> data_parallel;  // ascending
  int warmup = 2;                  // updates before the window
  int steps = 4;                   // updates in the window
  std::string out_dir;             // scaling.{md,json,txt} and one run directory per size
  std::string config_source;
  std::FILE* console = stdout;
};

struct ScalingReport {
  std::vector<ScalingRow> rows;
  std::string text;  // what was printed: window statement and table
  metrics::Json json;
};

// Runs the sweep and writes OUT/scaling.md, scaling.json and scaling.txt (the
// planner's --scaling format: "ranks tokens_per_s" rows). Throws std::invalid_argument
// when a size does not divide the global batch, and std::runtime_error when a run fails.
ScalingReport run_scaling(const Config& config, const ScalingOptions& options);

}  // namespace troupe::acceptance
