// Pipeline schedules as data: for p stages and m microbatches, the ordered list of
// forward / backward ops each stage executes in one update. Stage actors walk their
// list; nothing else decides the order of work inside a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::sched {

enum class OpKind : uint8_t { Forward, Backward };

struct PipelineOp {
  OpKind kind;
  int32_t microbatch;
  bool operator==(const PipelineOp&) const = default;
};

// ops[k] is stage k's ordered op list; every stage sees each microbatch once forward
// and once backward.
struct PipelineSchedule {
  int32_t stages = 0;
  int32_t microbatches = 0;
  std::vector<std::vector<PipelineOp>> ops;
};

// GPIPE: all forwards in microbatch order, then all backwards in microbatch order.
// ONE_F_ONE_B (non-interleaved): stage k runs min(p-k-1, m) warm-up forwards, then
// alternates one forward / one backward, then drains the remaining backwards; it holds
// at most p-k microbatches' activations at once.
PipelineSchedule build_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages,
                                         int32_t microbatches);

// Most microbatches whose forward has run but whose backward has not, on one stage.
int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops);

// Simulated execution of the op lists with a forward taking `forward_time` and a
// backward `backward_time` units, every op starting as soon as its stage is free and
// its input exists (forward of mb i on stage k after stage k-1's; backward of mb i on
// stage k after stage k+1's). Idle fraction = 1 - busy / (stages * makespan); for
// balanced stages it equals the ideal (p-1)/(m+p-1) of both schedules.
struct ScheduleTiming {
  double makespan = 0;
  double idle_fraction = 0;
  // start[k][i]: start time of stage k's i-th op.
  std::vector<std::vector<double>> start;
};
ScheduleTiming simulate_schedule(const PipelineSchedule& s, double forward_time = 1.0,
                                 double backward_time = 2.0);
// The same with each stage's own op times (forward_time[k], backward_time[k]): the
// idle an imbalance between stages implies. Throws std::invalid_argument unless both
// vectors have one entry per stage.
ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time);

// The closed form (p-1)/(m+p-1).
double ideal_idle_fraction(int64_t stages, int64_t microbatches);

std::string to_string(const PipelineOp& op);  // "F3" / "B3"

}  // namespace troupe::sched
