// The text `supervisor plan` prints: the planner's numbers (sched/planner.h) as
// readable tables. The text depends only on the Config and the inputs below, so
// two routes to the same Config (textproto, Megatron arguments) print the same plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "messages/config.pb.h"
#include "sched/planner.h"

namespace troupe::sched {

struct PlanInputs {
  int64_t token_budget = 0;             // > 0 replaces training.token_budget
  std::optional<double> tokens_per_s;   // measured throughput: adds the calendar
  double calendar_efficiency = 0.9;     // share of wall time spent training
  std::vector<ScalingPoint> scaling;    // --scaling rows (may be empty)
};

std::string render_plan(const Config& c, const PlanInputs& in);

// `supervisor plan --gpu-memory`: per stage, the total under NONE, SELECTIVE and FULL
// and the least recomputation that fits `gpu_bytes` (sched::fit_recompute), or
// "none fits".
std::string render_memory_fit(const Config& c, double gpu_bytes);

// 1234567 -> "1,234,567".
std::string group_digits(int64_t v);

}  // namespace troupe::sched
