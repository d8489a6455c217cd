#include "sched/schedule_verifier.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/derived.h"
#include "sched/schedule_mutation.h"

namespace troupe::sched {
namespace {

using Ops = std::vector<PipelineOp>;

// "stage 1 F3", with v > 1 "stage 1 chunk 0 F3": where an op runs.
std::string op_text(int32_t stage, const PipelineOp& op, int32_t v) {
  return v > 1 ? fmt::format("stage {} chunk {} {}", stage, op.chunk, to_string(op))
               : fmt::format("stage {} {}", stage, to_string(op));
}
// "F3", with v > 1 "chunk 0 F3": an op named where its stage is already said.
std::string op_label(const PipelineOp& op, int32_t v) {
  return v > 1 ? fmt::format("chunk {} {}", op.chunk, to_string(op)) : to_string(op);
}

const char* bound_formula(ParallelConfig::Schedule kind, int32_t v) {
  if (kind == ParallelConfig::GPIPE) return v > 1 ? "m v" : "m";
  if (kind == ParallelConfig::ZB_H1) return "min(p, m)";
  return v > 1 ? "min(2(p - k - 1) + (v - 1)p + 1, m v)" : "min(p - k, m)";
}

// The slot of (microbatch, chunk) in per-op tables of m v entries.
size_t slot(const PipelineOp& op, int32_t m) { return size_t(op.chunk) * size_t(m) + size_t(op.microbatch); }

// Rule 1 and 2 for one stage; "" when it holds. Each check runs over the whole list
// before the next, so that a duplicated op is reported as such and not as the
// in-flight excess it also causes.
std::string check_stage(const Ops& ops, int32_t k, int32_t m, int32_t v, int32_t bound, int32_t b_bound,
                        ParallelConfig::Schedule kind) {
  const bool split = kind == ParallelConfig::ZB_H1;  // weight passes of their own
  std::vector<int32_t> pos_f(size_t(m) * v, -1), pos_b(size_t(m) * v, -1), pos_w(size_t(m) * v, -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    if (op.microbatch < 0 || op.microbatch >= m)
      return fmt::format("{} (op {}) names a microbatch outside [0, {})", op_text(k, op, v), i, m);
    if (op.chunk < 0 || op.chunk >= v)
      return fmt::format("{} (op {}) names a chunk outside [0, {})", op_text(k, op, v), i, v);
    if (op.kind == OpKind::Weight && !split)
      return fmt::format("{} (op {}) is a weight pass, which only ZB_H1 runs", op_text(k, op, v), i);
    auto& pos = (op.kind == OpKind::Forward ? pos_f : op.kind == OpKind::Backward ? pos_b : pos_w)[slot(op, m)];
    if (pos >= 0) return fmt::format("{} runs twice (ops {} and {})", op_text(k, op, v), pos, i);
    pos = int32_t(i);
  }
  for (int32_t c = 0; c < v; ++c)
    for (int32_t j = 0; j < m; ++j) {
      const PipelineOp f{OpKind::Forward, j, c}, b{OpKind::Backward, j, c};
      if (pos_f[slot(f, m)] < 0) return op_text(k, f, v) + " never runs";
      if (pos_b[slot(b, m)] < 0) return op_text(k, b, v) + " never runs";
      if (const PipelineOp w{OpKind::Weight, j, c}; split && pos_w[slot(w, m)] < 0) return op_text(k, w, v) + " never runs";
    }
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::Backward && pos_f[slot(ops[i], m)] > int32_t(i))
      return v > 1 ? fmt::format("stage {} chunk {}: B{} before F{}", k, ops[i].chunk, ops[i].microbatch,
                                 ops[i].microbatch)
                   : fmt::format("stage {}: B{} before F{}", k, ops[i].microbatch, ops[i].microbatch);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::Weight && pos_b[slot(ops[i], m)] > int32_t(i))
      return v > 1 ? fmt::format("stage {} chunk {}: W{} before B{}", k, ops[i].chunk, ops[i].microbatch,
                                 ops[i].microbatch)
                   : fmt::format("stage {}: W{} before B{}", k, ops[i].microbatch, ops[i].microbatch);
  // In flight until the weight pass (ZB_H1) or the backward; under ZB_H1 also the
  // forwards awaiting their backward, against 1F1B's bound.
  int32_t live = 0, awaiting = 0;
  for (const auto& op : ops) {
    live += op.kind == OpKind::Forward ? 1 : op.kind == (split ? OpKind::Weight : OpKind::Backward) ? -1 : 0;
    awaiting += op.kind == OpKind::Forward ? 1 : op.kind == OpKind::Backward ? -1 : 0;
    if (live > bound)
      return fmt::format("{} puts {} activations in flight, over the bound {} = {}", op_text(k, op, v), live,
                         bound_formula(kind, v), bound);
    if (split && awaiting > b_bound)
      return fmt::format("{} puts {} activations in flight before their input-gradient pass, over the bound "
                         "min(p - k, m) = {}",
                         op_text(k, op, v), awaiting, b_bound);
  }
  return "";
}

// Rule 3 on the channel sender -> receiver for messages of one kind (activations:
// Forward, gradients: Backward): the ops the sender sends on it, as the receiver names
// them, against the ops the receiver receives from it, in list order.
std::string check_channel(const PipelineSchedule& s, int32_t sender, int32_t receiver, OpKind kind) {
  const int32_t v = s.chunks;
  std::vector<PipelineOp> sends, sent_as, receives;
  for (const auto& op : s.ops[size_t(sender)])
    if (op.kind == kind)
      if (const auto to = op_destination(s, sender, op); to.stage == receiver) {
        sends.push_back(to.op);
        sent_as.push_back(op);
      }
  for (const auto& op : s.ops[size_t(receiver)])
    if (op.kind == kind && op_source(s, receiver, op).stage == sender) receives.push_back(op);
  for (size_t i = 0; i < sends.size() && i < receives.size(); ++i)
    if (!(sends[i] == receives[i]))
      return fmt::format("stage {} receives {} before {} but stage {} sends {} first", receiver,
                         op_label(receives[i], v), op_label(sends[i], v), sender, op_label(sent_as[i], v));
  if (sends.size() != receives.size())
    return fmt::format("stage {} sends {} {} to stage {}, which receives {}", sender, sends.size(),
                       kind == OpKind::Forward ? "activations" : "gradients", receiver, receives.size());
  return "";
}

// Rule 4: runs the lists, each stage as far as its inputs allow; a stage is woken
// again when a neighbour produces what it may wait for, so every op is tried a
// bounded number of times. On a deadlock, names the cycle of waits.
std::string check_deadlock(const PipelineSchedule& s) {
  const int32_t p = s.stages, m = s.microbatches, v = s.chunks;
  std::vector<std::vector<char>> done_f(size_t(p), std::vector<char>(size_t(m) * v, 0)), done_b = done_f;
  std::vector<size_t> next(size_t(p), 0);
  auto is_done = [&](int32_t k, const PipelineOp& op) {
    return (op.kind == OpKind::Forward ? done_f : done_b)[size_t(k)][slot(op, m)] != 0;
  };
  std::vector<int32_t> work;
  for (int32_t k = p - 1; k >= 0; --k) work.push_back(k);
  while (!work.empty()) {
    const int32_t k = work.back();
    work.pop_back();
    const auto& ops = s.ops[size_t(k)];
    while (next[size_t(k)] < ops.size()) {
      const auto& op = ops[next[size_t(k)]];
      const OpLink from = op_source(s, k, op);  // the op this one waits for on a neighbour
      if (from.stage >= 0 && !is_done(from.stage, from.op)) break;
      // A weight pass waits for its own stage's backward only, earlier in the list (rule 2).
      if (op.kind != OpKind::Weight) (op.kind == OpKind::Forward ? done_f : done_b)[size_t(k)][slot(op, m)] = 1;
      ++next[size_t(k)];
      if (const int32_t woken = op_destination(s, k, op).stage; woken >= 0) work.push_back(woken);
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
    const PipelineOp op = s.ops[size_t(k)][next[size_t(k)]];
    const OpLink from = op_source(s, k, op);
    const PipelineOp head = s.ops[size_t(from.stage)][next[size_t(from.stage)]];
    std::string link = fmt::format("{} waits for stage {} {}", op_text(k, op, v), from.stage, op_label(from.op, v));
    if (!(head == from.op)) link += fmt::format(", queued behind stage {} {}", from.stage, op_label(head, v));
    links.push_back(std::move(link));
    k = from.stage;
  }
  std::string out = "deadlock: ";
  for (size_t i = size_t(seen_at[size_t(k)]); i < links.size(); ++i) out += links[i] + "; ";
  return out + fmt::format("and so on (stage {} {})", k, op_label(s.ops[size_t(k)][next[size_t(k)]], v));
}

// Rule 5, the worst case over executions: for every point of stage k's list, how far
// the sender can have run (it is held back only by what it needs from stage k; its
// other neighbour is assumed never to hold it back, which can only overstate), and so
// how many of its messages of `kind` (Forward: activations, Backward: gradients)
// stage k holds unconsumed.
int32_t peak_buffered(const PipelineSchedule& s, int32_t k, int32_t sender, OpKind kind) {
  const int32_t m = s.microbatches;
  const Ops& own = s.ops[size_t(k)];
  const Ops& theirs = s.ops[size_t(sender)];
  std::vector<char> done_f(size_t(m) * s.chunks, 0), done_b = done_f;  // stage k's ops done
  size_t q = 0;
  int32_t sent = 0, consumed = 0, peak = 0;
  for (size_t i = 0; i <= own.size(); ++i) {
    while (q < theirs.size()) {
      const OpLink needs = op_source(s, sender, theirs[q]);
      if (needs.stage == k && !(needs.op.kind == OpKind::Forward ? done_f : done_b)[slot(needs.op, m)]) break;
      if (theirs[q].kind == kind && op_destination(s, sender, theirs[q]).stage == k) ++sent;
      ++q;
    }
    peak = std::max(peak, sent - consumed);
    if (i == own.size()) break;
    if (own[i].kind == kind && op_source(s, k, own[i]).stage == sender) ++consumed;
    if (own[i].kind != OpKind::Weight) (own[i].kind == OpKind::Forward ? done_f : done_b)[slot(own[i], m)] = 1;
  }
  return peak;
}

// The stage whose activations stage k receives (-1: none, the first stage with one
// chunk), and the one whose gradients it receives (-1: none, the last stage with one chunk).
int32_t activation_sender(int32_t p, int32_t k, int32_t v) { return k > 0 ? k - 1 : (v > 1 ? p - 1 : -1); }
int32_t gradient_sender(int32_t p, int32_t k, int32_t v) { return k < p - 1 ? k + 1 : (v > 1 ? 0 : -1); }

}  // namespace

int32_t in_flight_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage, int32_t microbatches,
                        int32_t chunks) {
  const int32_t total = microbatches * chunks;
  if (kind == ParallelConfig::GPIPE) return total;
  if (kind == ParallelConfig::ZB_H1) return std::min(stages, microbatches);
  if (chunks == 1) return std::min(stages - stage, microbatches);
  return std::min(2 * (stages - stage - 1) + (chunks - 1) * stages + 1, total);
}

int32_t backward_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage, int32_t microbatches,
                       int32_t chunks) {
  if (kind == ParallelConfig::ZB_H1) return std::min(stages - stage, microbatches);
  return in_flight_bound(kind, stages, stage, microbatches, chunks);
}

int32_t activation_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                                int32_t microbatches, int32_t chunks) {
  const int32_t sender = activation_sender(stages, stage, chunks);
  return sender < 0 ? 0 : backward_bound(kind, stages, sender, microbatches, chunks);
}

int32_t gradient_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                              int32_t microbatches, int32_t chunks) {
  return gradient_sender(stages, stage, chunks) < 0 ? 0 : backward_bound(kind, stages, stage, microbatches, chunks);
}

ScheduleReport verify_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  ScheduleReport r;
  const int32_t p = s.stages, m = s.microbatches, v = s.chunks;
  auto fail = [&](std::string e) {
    r.error = std::move(e);
    return r;
  };
  if (p < 1 || m < 1 || v < 1)
    return fail(fmt::format("needs at least one stage, one microbatch and one chunk (p = {}, m = {}, v = {})", p, m, v));
  if (s.ops.size() != size_t(p)) return fail(fmt::format("{} op lists for {} stages", s.ops.size(), p));
  for (int32_t k = 0; k < p; ++k)
    if (auto e = check_stage(s.ops[size_t(k)], k, m, v, in_flight_bound(kind, p, k, m, v),
                             backward_bound(kind, p, k, m, v), kind);
        !e.empty())
      return fail(std::move(e));
  for (int32_t k = 0; k + 1 < p; ++k) {
    if (auto e = check_channel(s, k, k + 1, OpKind::Forward); !e.empty()) return fail(std::move(e));
    if (auto e = check_channel(s, k + 1, k, OpKind::Backward); !e.empty()) return fail(std::move(e));
  }
  if (v > 1) {  // the wrap-around: chunk c of the last stage feeds chunk c + 1 of the first
    if (auto e = check_channel(s, p - 1, 0, OpKind::Forward); !e.empty()) return fail(std::move(e));
    if (auto e = check_channel(s, 0, p - 1, OpKind::Backward); !e.empty()) return fail(std::move(e));
  }
  if (auto e = check_deadlock(s); !e.empty()) return fail(std::move(e));
  for (int32_t k = 0; k < p; ++k) {
    const int32_t from_acts = activation_sender(p, k, v), from_grads = gradient_sender(p, k, v);
    const int32_t acts = from_acts < 0 ? 0 : peak_buffered(s, k, from_acts, OpKind::Forward);
    const int32_t grads = from_grads < 0 ? 0 : peak_buffered(s, k, from_grads, OpKind::Backward);
    // Implied by rules 2-4 (docs/runtime.md); checked all the same.
    if (const int32_t b = activation_buffer_bound(kind, p, k, m, v); acts > b)
      return fail(fmt::format("stage {} may hold {} activations unconsumed, over the bound {}", k, acts, b));
    if (const int32_t b = gradient_buffer_bound(kind, p, k, m, v); grads > b)
      return fail(fmt::format("stage {} may hold {} gradients unconsumed, over the bound {}", k, grads, b));
    r.in_flight_bound.push_back(in_flight_bound(kind, p, k, m, v));
    r.peak_in_flight.push_back(peak_in_flight(s.ops[size_t(k)]));
    r.peak_buffered_activations.push_back(acts);
    r.peak_buffered_gradients.push_back(grads);
  }
  r.ok = true;
  return r;
}

void require_valid_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  const auto r = verify_schedule(s, kind);
  if (!r.ok)
    throw ScheduleViolation(fmt::format("pipeline schedule {} (p = {}, m = {}, v = {}{}): {}",
                                        schedule_name(kind, s.chunks), s.stages, s.microbatches, s.chunks,
                                        s.chunks == 1 ? ", every op chunk 0" : "", r.error));
}

PipelineSchedule verified_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages, int32_t microbatches) {
  auto s = build_pipeline_schedule(kind, stages, microbatches);
  require_valid_schedule(s, kind);
  return s;
}

PipelineSchedule verified_pipeline_schedule(const Config& c) {
  const auto kind = c.parallel().schedule();
  auto s = build_pipeline_schedule(c);
  // Test-only: a deliberately broken list (sched/schedule_mutation.h); none outside tests.
  if (const auto m = schedule_mutation_from_env()) apply_schedule_mutation(*m, s);
  require_valid_schedule(s, kind);
  return s;
}

std::string schedule_name(ParallelConfig::Schedule kind, int32_t chunks) {
  return chunks > 1 && kind == ParallelConfig::ONE_F_ONE_B ? ParallelConfig::Schedule_Name(ParallelConfig::INTERLEAVED_1F1B)
                                                           : ParallelConfig::Schedule_Name(kind);
}

std::string schedule_verdict_line(const PipelineSchedule& s, ParallelConfig::Schedule kind) {
  const auto r = verify_schedule(s, kind);
  const auto name = schedule_name(kind, s.chunks);
  if (!r.ok) return fmt::format("pipeline schedule {} REFUSED (p = {}, m = {}): {}", name, s.stages, s.microbatches, r.error);
  return fmt::format(
      "pipeline schedule {} verified (p = {}, m = {}, v = {}): in flight per stage {} (bound {}); buffered "
      "activations at most {}, gradients at most {}",
      name, s.stages, s.microbatches, s.chunks, fmt::join(r.peak_in_flight, " "), bound_formula(kind, s.chunks),
      fmt::join(r.peak_buffered_activations, " "), fmt::join(r.peak_buffered_gradients, " "));
}

}  // namespace troupe::sched
