#include "sched/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "config/derived.h"

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

std::vector<PipelineOp> zb_h1_stage(int32_t p, int32_t k, int32_t m) {
  std::vector<PipelineOp> ops;
  ops.reserve(size_t(3 * m));
  const int32_t warmup = std::min(p - k - 1, m), in_flight = std::min(p, m);
  int32_t next_f = 0, next_b = 0, next_w = 0;
  for (; next_f < warmup; ++next_f) ops.push_back({OpKind::Forward, next_f});
  while (next_f < m) {  // steady state: F B, then W once min(p, m) are in flight
    ops.push_back({OpKind::Forward, next_f++});
    ops.push_back({OpKind::Backward, next_b++});
    if (next_f - next_w >= in_flight) ops.push_back({OpKind::Weight, next_w++});
  }
  while (next_b < m) {  // cool-down: each B with a W behind it
    ops.push_back({OpKind::Backward, next_b++});
    ops.push_back({OpKind::Weight, next_w++});
  }
  while (next_w < m) ops.push_back({OpKind::Weight, next_w++});  // the held-back W's
  return ops;
}

// Stage k's i-th forward (or, with the chunks reversed, backward) of the interleaved
// schedule.
PipelineOp interleaved_op(OpKind kind, int64_t i, int32_t p, int32_t v) {
  const int64_t group = i / (int64_t(p) * v), within = i % (int64_t(p) * v);
  const int32_t chunk = int32_t(within / p);
  return {kind, int32_t(group * p + within % p), kind == OpKind::Forward ? chunk : v - 1 - chunk};
}

}  // namespace

OpLink op_source(const PipelineSchedule& s, int32_t k, const PipelineOp& op) {
  const int32_t p = s.stages, v = s.chunks;
  if (op.kind == OpKind::Weight) return {};
  if (op.kind == OpKind::Forward) {
    if (k > 0) return {k - 1, op};
    if (op.chunk > 0) return {p - 1, {op.kind, op.microbatch, op.chunk - 1}};
  } else {
    if (k < p - 1) return {k + 1, op};
    if (op.chunk < v - 1) return {0, {op.kind, op.microbatch, op.chunk + 1}};
  }
  return {};
}

OpLink op_destination(const PipelineSchedule& s, int32_t k, const PipelineOp& op) {
  const int32_t p = s.stages, v = s.chunks;
  if (op.kind == OpKind::Weight) return {};
  if (op.kind == OpKind::Forward) {
    if (k < p - 1) return {k + 1, op};
    if (op.chunk < v - 1) return {0, {op.kind, op.microbatch, op.chunk + 1}};
  } else {
    if (k > 0) return {k - 1, op};
    if (op.chunk > 0) return {p - 1, {op.kind, op.microbatch, op.chunk - 1}};
  }
  return {};
}

PipelineSchedule build_interleaved_schedule(int32_t p, int32_t m, int32_t v) {
  if (p < 2 || v < 2 || m < 1 || m % p != 0)
    throw std::invalid_argument("the interleaved schedule needs p >= 2 stages, v >= 2 chunks a stage and a multiple "
                                "of p microbatches (p = " + std::to_string(p) + ", v = " + std::to_string(v) +
                                ", m = " + std::to_string(m) + ")");
  PipelineSchedule s{p, m, {}, v};
  const int64_t total = int64_t(m) * v;
  for (int32_t k = 0; k < p; ++k) {
    std::vector<PipelineOp> ops;
    ops.reserve(size_t(2 * total));
    const int64_t warmup = std::min<int64_t>(2 * (p - k - 1) + int64_t(v - 1) * p, total);
    int64_t next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) ops.push_back(interleaved_op(OpKind::Forward, next_f, p, v));
    while (next_f < total) {
      ops.push_back(interleaved_op(OpKind::Forward, next_f++, p, v));
      ops.push_back(interleaved_op(OpKind::Backward, next_b++, p, v));
    }
    while (next_b < total) ops.push_back(interleaved_op(OpKind::Backward, next_b++, p, v));
    s.ops.push_back(std::move(ops));
  }
  return s;
}

PipelineSchedule build_pipeline_schedule(const Config& c) {
  const auto& par = c.parallel();
  const auto m = int32_t(config::microbatches_per_replica(c));
  if (par.schedule() == ParallelConfig::INTERLEAVED_1F1B)
    return build_interleaved_schedule(par.pipeline(), m, par.virtual_stages());
  return build_pipeline_schedule(par.schedule(), par.pipeline(), m);
}

std::vector<PipelineOp> forward_pass_order(int32_t stages, int32_t microbatches, int32_t chunks) {
  std::vector<PipelineOp> ops;
  const int32_t group = chunks > 1 ? std::max(1, stages) : std::max(1, microbatches);
  for (int32_t g = 0; g < microbatches; g += group)
    for (int32_t c = 0; c < std::max(1, chunks); ++c)
      for (int32_t j = g; j < std::min(microbatches, g + group); ++j) ops.push_back({OpKind::Forward, j, c});
  return ops;
}

PipelineSchedule build_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages,
                                         int32_t microbatches) {
  if (stages < 1 || microbatches < 1)
    throw std::invalid_argument("pipeline schedule needs at least one stage and one microbatch");
  if (kind == ParallelConfig::INTERLEAVED_1F1B)
    throw std::invalid_argument("the INTERLEAVED_1F1B schedule needs its chunks a stage (build_interleaved_schedule)");
  PipelineSchedule s{stages, microbatches, {}};
  s.ops.reserve(stages);
  for (int32_t k = 0; k < stages; ++k)
    s.ops.push_back(kind == ParallelConfig::GPIPE   ? gpipe_stage(microbatches)
                    : kind == ParallelConfig::ZB_H1 ? zb_h1_stage(stages, k, microbatches)
                                                    : one_f_one_b_stage(stages, k, microbatches));
  return s;
}

namespace {

// Most forwards whose `until` op has not run yet.
int32_t peak_live(const std::vector<PipelineOp>& stage_ops, OpKind until) {
  int32_t live = 0, peak = 0;
  for (const auto& op : stage_ops) {
    live += op.kind == OpKind::Forward ? 1 : op.kind == until ? -1 : 0;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops) {
  const bool split = std::any_of(stage_ops.begin(), stage_ops.end(),
                                 [](const PipelineOp& op) { return op.kind == OpKind::Weight; });
  return peak_live(stage_ops, split ? OpKind::Weight : OpKind::Backward);
}

int32_t peak_awaiting_backward(const std::vector<PipelineOp>& stage_ops) {
  return peak_live(stage_ops, OpKind::Backward);
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, double forward_time, double backward_time,
                                 double weight_time) {
  const size_t p = size_t(std::max(0, s.stages));
  return simulate_schedule(s, std::vector<double>(p, forward_time), std::vector<double>(p, backward_time),
                           std::vector<double>(p, weight_time));
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time) {
  return simulate_schedule(s, forward_time, backward_time, std::vector<double>(forward_time.size(), 1.0));
}

ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time, const std::vector<double>& weight_time) {
  const int32_t p = s.stages, m = s.microbatches, v = s.chunks;
  if (forward_time.size() != size_t(p) || backward_time.size() != size_t(p))
    throw std::invalid_argument("simulate_schedule: " + std::to_string(forward_time.size()) + " forward and " +
                                std::to_string(backward_time.size()) + " backward times for " + std::to_string(p) +
                                " stages");
  if (weight_time.size() != size_t(p))
    throw std::invalid_argument("simulate_schedule: " + std::to_string(weight_time.size()) + " weight-pass times for " +
                                std::to_string(p) + " stages");
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // done[kind][k][c m + i]: finish time of op kind on stage k for microbatch i of chunk c.
  std::vector<std::vector<double>> done_f(p, std::vector<double>(size_t(m) * v, kNotYet));
  std::vector<std::vector<double>> done_b(p, std::vector<double>(size_t(m) * v, kNotYet));
  auto at = [m](const PipelineOp& op) { return size_t(op.chunk) * size_t(m) + size_t(op.microbatch); };
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
      const OpLink src = op_source(s, k, op);
      const double input =
          src.stage < 0 ? 0.0 : (op.kind == OpKind::Forward ? done_f : done_b)[size_t(src.stage)][at(src.op)];
      const double ready = op.kind == OpKind::Forward  ? input
                           : op.kind == OpKind::Weight ? done_b[k][at(op)]
                                                       : std::max(done_f[k][at(op)], input);
      if (ready == kNotYet) continue;
      const double begin = std::max(ready, free_at[k]);
      const double dur = (op.kind == OpKind::Forward    ? forward_time[size_t(k)]
                          : op.kind == OpKind::Backward ? backward_time[size_t(k)]
                                                        : weight_time[size_t(k)]) /
                         v;
      if (op.kind != OpKind::Weight) (op.kind == OpKind::Forward ? done_f : done_b)[k][at(op)] = begin + dur;
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

double ideal_idle_fraction(int64_t stages, int64_t microbatches, int64_t chunks) {
  return double(stages - 1) / (double(chunks) * double(microbatches) + double(stages - 1));
}

double zero_bubble_idle_fraction(int64_t stages, int64_t microbatches) {
  const double p = double(stages), m = double(microbatches);
  if (microbatches >= stages) return (p - 1) / (3 * m + p - 1);
  return 1.0 - 3 * m / (2 * (m + p) - 1);
}

std::string to_string(const PipelineOp& op) {
  std::string out(1, op.kind == OpKind::Forward ? 'F' : op.kind == OpKind::Backward ? 'B' : 'W');
  out += std::to_string(op.microbatch);
  return out;
}

}  // namespace troupe::sched
