#include "sched/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace troupe::sched {
namespace {

std::vector<PipelineOp> gpipe_stage(int32_t m) {
  std::vector<PipelineOp> ops;
  ops.reserve(2 * m);
  for (int32_t i = 0; i < m; ++i) ops.push_back({OpKind::Forward, i});
  for (int32_t i = 0; i < m; ++i) ops.push_back({OpKind::Backward, i});
  return ops;
}

std::vector<PipelineOp> one_f_one_b_stage(int32_t p, int32_t k, int32_t m) {
  std::vector<PipelineOp> ops;
  ops.reserve(2 * m);
  const int32_t warmup = std::min(p - k - 1, m);
  int32_t next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) ops.push_back({OpKind::Forward, next_f});
  while (next_f < m) {  // steady state: one forward, one backward
    ops.push_back({OpKind::Forward, next_f++});
    ops.push_back({OpKind::Backward, next_b++});
  }
  while (next_b < m) ops.push_back({OpKind::Backward, next_b++});  // drain
  return ops;
}

}  // namespace

PipelineSchedule build_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages,
                                         int32_t microbatches) {
  if (stages < 1 || microbatches < 1)
    throw std::invalid_argument("pipeline schedule needs at least one stage and one microbatch");
  PipelineSchedule s{stages, microbatches, {}};
  s.ops.reserve(stages);
  for (int32_t k = 0; k < stages; ++k)
    s.ops.push_back(kind == ParallelConfig::GPIPE ? gpipe_stage(microbatches)
                                                  : one_f_one_b_stage(stages, k, microbatches));
  return s;
}

int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops) {
  int32_t live = 0, peak = 0;
  for (const auto& op : stage_ops) {
    live += op.kind == OpKind::Forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, double forward_time,
                                 double backward_time) {
  return simulate_schedule(s, std::vector<double>(size_t(s.stages), forward_time),
                           std::vector<double>(size_t(s.stages), backward_time));
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time) {
  const int32_t p = s.stages, m = s.microbatches;
  if (forward_time.size() != size_t(p) || backward_time.size() != size_t(p))
    throw std::invalid_argument("simulate_schedule: " + std::to_string(forward_time.size()) + " forward and " +
                                std::to_string(backward_time.size()) + " backward times for " + std::to_string(p) +
                                " stages");
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // done[kind][k][i]: finish time of op kind on stage k for microbatch i.
  std::vector<std::vector<double>> done_f(p, std::vector<double>(m, kNotYet));
  std::vector<std::vector<double>> done_b(p, std::vector<double>(m, kNotYet));
  ScheduleTiming t;
  t.start.assign(p, {});
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  double busy = 0;
  // Repeatedly run any stage whose next op is ready; the schedules here never
  // deadlock, and a schedule that does is reported instead of looping forever.
  size_t remaining = 0;
  for (const auto& ops : s.ops) remaining += ops.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int32_t k = 0; k < p; ++k) {
      if (next[k] == s.ops[k].size()) continue;
      const PipelineOp op = s.ops[k][next[k]];
      double ready;
      if (op.kind == OpKind::Forward)
        ready = k == 0 ? 0.0 : done_f[k - 1][op.microbatch];
      else
        ready = std::max(done_f[k][op.microbatch],
                         k == p - 1 ? 0.0 : done_b[k + 1][op.microbatch]);
      if (ready == kNotYet) continue;
      const double begin = std::max(ready, free_at[k]);
      const double dur = op.kind == OpKind::Forward ? forward_time[size_t(k)] : backward_time[size_t(k)];
      (op.kind == OpKind::Forward ? done_f : done_b)[k][op.microbatch] = begin + dur;
      free_at[k] = begin + dur;
      t.start[k].push_back(begin);
      busy += dur;
      ++next[k];
      --remaining;
      progressed = true;
    }
    if (!progressed) throw std::logic_error("pipeline schedule deadlocks");
  }
  t.makespan = *std::max_element(free_at.begin(), free_at.end());
  t.idle_fraction = 1.0 - busy / (double(p) * t.makespan);
  return t;
}

double ideal_idle_fraction(int64_t stages, int64_t microbatches) {
  return double(stages - 1) / (double(microbatches) + double(stages - 1));
}

std::string to_string(const PipelineOp& op) {
  std::string out(1, op.kind == OpKind::Forward ? 'F' : 'B');
  out += std::to_string(op.microbatch);
  return out;
}

}  // namespace troupe::sched
