// The text `supervisor plan` prints: the planner's numbers (sched/planner.h) as
// readable tables. The text depends only on the Config and the inputs below, so
// two routes to the same Config (textproto, Megatron arguments) print the same plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "messages/config.pb.h"
#include "sched/failure_calendar.h"
#include "sched/planner.h"

namespace troupe::sched {

struct PlanInputs {
  int64_t token_budget = 0;             // > 0 replaces training.token_budget
  std::optional<double> tokens_per_s;   // measured throughput: adds the calendar
  double calendar_efficiency = 0.9;     // share of wall time spent training
  std::vector<ScalingPoint> scaling;    // --scaling rows (may be empty)
  // The calendar with failures (sched/failure_calendar.h), with a throughput: the
  // failure rate per GPU-hour (or the cluster's mean time between failures), the
  // seconds a checkpoint save stalls training and the seconds from a failure to
  // training again. Empty rate and MTBF: no failure calendar.
  std::optional<double> failures_per_gpu_hour;
  std::optional<double> mtbf_hours;
  double save_stall_s = 0;
  double recovery_s = 0;
  Recovery recovery = Recovery::Restart;
};

std::string render_plan(const Config& c, const PlanInputs& in);

// `supervisor plan --gpu-memory`: per stage, the total under NONE, SELECTIVE and FULL
// and the least recomputation that fits `gpu_bytes` (sched::fit_recompute), or
// "none fits".
std::string render_memory_fit(const Config& c, double gpu_bytes);

// 1234567 -> "1,234,567".
std::string group_digits(int64_t v);

}  // namespace troupe::sched
