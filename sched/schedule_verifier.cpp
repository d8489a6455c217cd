#include "sched/schedule_verifier.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/derived.h"
#include "sched/schedule_mutation.h"

namespace troupe::sched {
namespace {

using Ops = std::vector<PipelineOp>;

std::string op_text(int32_t stage, const PipelineOp& op) { return fmt::format("stage {} {}", stage, to_string(op)); }

const char* bound_formula(ParallelConfig::Schedule kind) {
  return kind == ParallelConfig::GPIPE ? "m" : "min(p - k, m)";
}

// Rule 1 and 2 for one stage; "" when it holds. Each check runs over the whole list
// before the next, so that a duplicated op is reported as such and not as the
// in-flight excess it also causes.
std::string check_stage(const Ops& ops, int32_t k, int32_t m, int32_t bound, ParallelConfig::Schedule kind) {
  std::vector<int32_t> pos_f(size_t(m), -1), pos_b(size_t(m), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    if (op.microbatch < 0 || op.microbatch >= m)
      return fmt::format("{} (op {}) names a microbatch outside [0, {})", op_text(k, op), i, m);
    auto& pos = (op.kind == OpKind::Forward ? pos_f : pos_b)[size_t(op.microbatch)];
    if (pos >= 0) return fmt::format("{} runs twice (ops {} and {})", op_text(k, op), pos, i);
    pos = int32_t(i);
  }
  for (int32_t j = 0; j < m; ++j) {
    if (pos_f[size_t(j)] < 0) return fmt::format("stage {} F{} never runs", k, j);
    if (pos_b[size_t(j)] < 0) return fmt::format("stage {} B{} never runs", k, j);
  }
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::Backward && pos_f[size_t(ops[i].microbatch)] > int32_t(i))
      return fmt::format("stage {}: B{} before F{}", k, ops[i].microbatch, ops[i].microbatch);
  int32_t live = 0;
  for (const auto& op : ops) {
    live += op.kind == OpKind::Forward ? 1 : -1;
    if (live > bound)
      return fmt::format("{} puts {} activations in flight, over the bound {} = {}", op_text(k, op), live,
                         bound_formula(kind), bound);
  }
  return "";
}

// The microbatches of one kind of op, in list order: a stage's sends (or receives).
std::vector<int32_t> order_of(const Ops& ops, OpKind kind) {
  std::vector<int32_t> out;
  for (const auto& op : ops)
    if (op.kind == kind) out.push_back(op.microbatch);
  return out;
}

// Rule 3 on one channel: sender's sends against receiver's receives.
std::string check_channel(const Ops& sender_ops, int32_t sender, const Ops& receiver_ops, int32_t receiver,
                          OpKind kind) {
  const auto sends = order_of(sender_ops, kind), receives = order_of(receiver_ops, kind);
  const char c = kind == OpKind::Forward ? 'F' : 'B';
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i] != receives[i])
      return fmt::format("stage {} receives {}{} before {}{} but stage {} sends {}{} first", receiver, c, receives[i],
                         c, sends[i], sender, c, sends[i]);
  return "";
}

// Rule 4: runs the lists, each stage as far as its inputs allow; a stage is woken
// again when a neighbour produces what it may wait for, so every op is tried a
// bounded number of times. On a deadlock, names the cycle of waits.
std::string check_deadlock(const PipelineSchedule& s) {
  const int32_t p = s.stages, m = s.microbatches;
  std::vector<std::vector<char>> done_f(size_t(p), std::vector<char>(size_t(m), 0)), done_b = done_f;
  std::vector<size_t> next(size_t(p), 0);
  // The op a stage's next op waits for on a neighbour: {stage, op}; stage -1 if none.
  auto awaited = [&](int32_t k) -> std::pair<int32_t, PipelineOp> {
    const auto& op = s.ops[size_t(k)][next[size_t(k)]];
    if (op.kind == OpKind::Forward) return {k == 0 ? -1 : k - 1, op};
    return {k == p - 1 ? -1 : k + 1, op};
  };
  auto is_done = [&](int32_t k, const PipelineOp& op) {
    return (op.kind == OpKind::Forward ? done_f : done_b)[size_t(k)][size_t(op.microbatch)] != 0;
  };
  std::vector<int32_t> work;
  for (int32_t k = p - 1; k >= 0; --k) work.push_back(k);
  while (!work.empty()) {
    const int32_t k = work.back();
    work.pop_back();
    const auto& ops = s.ops[size_t(k)];
    while (next[size_t(k)] < ops.size()) {
      const auto [from, op] = awaited(k);
      if (from >= 0 && !is_done(from, op)) break;
      (op.kind == OpKind::Forward ? done_f : done_b)[size_t(k)][size_t(op.microbatch)] = 1;
      ++next[size_t(k)];
      const int32_t woken = op.kind == OpKind::Forward ? k + 1 : k - 1;
      if (woken >= 0 && woken < p) work.push_back(woken);
    }
  }
  int32_t stuck = -1;
  for (int32_t k = 0; k < p && stuck < 0; ++k)
    if (next[size_t(k)] < s.ops[size_t(k)].size()) stuck = k;
  if (stuck < 0) return "";
  // Follow the waits from the first stuck stage until a stage repeats: a stuck
  // stage's head waits for an op not yet run, so its sender is stuck too.
  std::vector<int32_t> seen_at(size_t(p), -1);
  std::vector<std::string> links;
  int32_t k = stuck;
  while (seen_at[size_t(k)] < 0) {
    seen_at[size_t(k)] = int32_t(links.size());
    const auto [from, op] = awaited(k);
    const PipelineOp head = s.ops[size_t(from)][next[size_t(from)]];
    std::string link = fmt::format("{} waits for stage {} {}", op_text(k, op), from, to_string(op));
    if (!(head == op)) link += fmt::format(", queued behind stage {} {}", from, to_string(head));
    links.push_back(std::move(link));
    k = from;
  }
  std::string out = "deadlock: ";
  for (size_t i = size_t(seen_at[size_t(k)]); i < links.size(); ++i) out += links[i] + "; ";
  return out + fmt::format("and so on (stage {} {})", k, to_string(s.ops[size_t(k)][next[size_t(k)]]));
}

// Rule 5, the worst case over executions: for every point of stage k's list, how far
// the neighbour can have run (it is held back only by what it needs from stage k;
// its other neighbour is assumed never to hold it back, which can only overstate),
// and so how many of its messages stage k holds unconsumed.
// `kind` is the message kind: Forward for activations from k-1, Backward for
// gradients from k+1.
int32_t peak_buffered(const Ops& own, const Ops& neighbour, OpKind kind, int32_t m) {
  const OpKind needs = kind == OpKind::Forward ? OpKind::Backward : OpKind::Forward;  // what it needs from k
  std::vector<char> done(size_t(m), 0);  // stage k's ops of kind `needs`, done
  size_t q = 0;
  int32_t sent = 0, consumed = 0, peak = 0;
  for (size_t i = 0; i <= own.size(); ++i) {
    while (q < neighbour.size() &&
           (neighbour[q].kind != needs || done[size_t(neighbour[q].microbatch)])) {
      if (neighbour[q].kind == kind) ++sent;
      ++q;
    }
    peak = std::max(peak, sent - consumed);
    if (i == own.size()) break;
    if (own[i].kind == kind) ++consumed;
    if (own[i].kind == needs) done[size_t(own[i].microbatch)] = 1;
  }
  return peak;
}

}  // namespace

int32_t in_flight_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage, int32_t microbatches) {
  return kind == ParallelConfig::GPIPE ? microbatches : std::min(stages - stage, microbatches);
}

int32_t activation_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                                int32_t microbatches) {
  return stage == 0 ? 0 : in_flight_bound(kind, stages, stage - 1, microbatches);
}

int32_t gradient_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                              int32_t microbatches) {
  return stage == stages - 1 ? 0 : in_flight_bound(kind, stages, stage, microbatches);
}

ScheduleReport verify_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  ScheduleReport r;
  const int32_t p = s.stages, m = s.microbatches;
  auto fail = [&](std::string e) {
    r.error = std::move(e);
    return r;
  };
  if (p < 1 || m < 1) return fail(fmt::format("needs at least one stage and one microbatch (p = {}, m = {})", p, m));
  if (s.ops.size() != size_t(p)) return fail(fmt::format("{} op lists for {} stages", s.ops.size(), p));
  for (int32_t k = 0; k < p; ++k)
    if (auto e = check_stage(s.ops[size_t(k)], k, m, in_flight_bound(kind, p, k, m), kind); !e.empty())
      return fail(std::move(e));
  for (int32_t k = 0; k + 1 < p; ++k) {
    const auto& here = s.ops[size_t(k)];
    const auto& there = s.ops[size_t(k + 1)];
    if (auto e = check_channel(here, k, there, k + 1, OpKind::Forward); !e.empty()) return fail(std::move(e));
    if (auto e = check_channel(there, k + 1, here, k, OpKind::Backward); !e.empty()) return fail(std::move(e));
  }
  if (auto e = check_deadlock(s); !e.empty()) return fail(std::move(e));
  for (int32_t k = 0; k < p; ++k) {
    const auto& ops = s.ops[size_t(k)];
    const int32_t acts = k == 0 ? 0 : peak_buffered(ops, s.ops[size_t(k - 1)], OpKind::Forward, m);
    const int32_t grads = k == p - 1 ? 0 : peak_buffered(ops, s.ops[size_t(k + 1)], OpKind::Backward, m);
    // Implied by rules 2-4 (docs/runtime.md); checked all the same.
    if (const int32_t b = activation_buffer_bound(kind, p, k, m); acts > b)
      return fail(fmt::format("stage {} may hold {} activations unconsumed, over the bound {}", k, acts, b));
    if (const int32_t b = gradient_buffer_bound(kind, p, k, m); grads > b)
      return fail(fmt::format("stage {} may hold {} gradients unconsumed, over the bound {}", k, grads, b));
    r.in_flight_bound.push_back(in_flight_bound(kind, p, k, m));
    r.peak_in_flight.push_back(peak_in_flight(ops));
    r.peak_buffered_activations.push_back(acts);
    r.peak_buffered_gradients.push_back(grads);
  }
  r.ok = true;
  return r;
}

void require_valid_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  const auto r = verify_schedule(s, kind);
  if (!r.ok)
    throw ScheduleViolation(fmt::format("pipeline schedule {} (p = {}, m = {}, v = 1, every op chunk 0): {}",
                                        ParallelConfig::Schedule_Name(kind), s.stages, s.microbatches, r.error));
}

PipelineSchedule verified_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages, int32_t microbatches) {
  auto s = build_pipeline_schedule(kind, stages, microbatches);
  require_valid_schedule(s, kind);
  return s;
}

PipelineSchedule verified_pipeline_schedule(const Config& c) {
  const auto kind = c.parallel().schedule();
  auto s = build_pipeline_schedule(kind, c.parallel().pipeline(), int32_t(config::microbatches_per_replica(c)));
  // Test-only: a deliberately broken list (sched/schedule_mutation.h); none outside tests.
  if (const auto m = schedule_mutation_from_env()) apply_schedule_mutation(*m, s);
  require_valid_schedule(s, kind);
  return s;
}

std::string schedule_verdict_line(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  const auto r = verify_schedule(s, kind);
  const auto name = ParallelConfig::Schedule_Name(kind);
  if (!r.ok) return fmt::format("pipeline schedule {} REFUSED (p = {}, m = {}): {}", name, s.stages, s.microbatches, r.error);
  return fmt::format(
      "pipeline schedule {} verified (p = {}, m = {}, v = 1): in flight per stage {} (bound {}); buffered "
      "activations at most {}, gradients at most {}",
      name, s.stages, s.microbatches, fmt::join(r.peak_in_flight, " "), bound_formula(kind),
      fmt::join(r.peak_buffered_activations, " "), fmt::join(r.peak_buffered_gradients, " "));
}

}  // namespace troupe::sched
