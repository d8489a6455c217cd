#include "sched/slot_reuse.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace troupe::sched {
namespace {

using OpKey = std::tuple<OpKind, int32_t, int32_t>;  // kind, microbatch, chunk

OpKey key_of(const PipelineOp& op) { return {op.kind, op.microbatch, op.chunk}; }

// clock[k][i][j]: the highest index of stage j's ops that happens before or is stage
// k's op i (-1: none).
struct HappensBefore {
  std::vector<std::map<OpKey, int32_t>> index;  // per stage: op -> its index
  std::vector<std::vector<std::vector<int32_t>>> clock;

  explicit HappensBefore(const PipelineSchedule& s) {
    const size_t p = s.ops.size();
    index.resize(p);
    clock.resize(p);
    for (size_t k = 0; k < p; ++k) {
      for (size_t i = 0; i < s.ops[k].size(); ++i) index[k][key_of(s.ops[k][i])] = int32_t(i);
      clock[k].resize(s.ops[k].size());
    }
    // Any execution order the waits allow: run each stage's next op once its source ran.
    std::vector<size_t> next(p, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t k = 0; k < p; ++k) {
        while (next[k] < s.ops[k].size()) {
          const size_t i = next[k];
          const PipelineOp& op = s.ops[k][i];
          const OpLink src = op_source(s, int32_t(k), op);
          int32_t src_index = -1;
          if (src.stage >= 0) {
            src_index = at(src.stage, src.op);
            if (size_t(src_index) >= next[size_t(src.stage)]) break;  // not run yet
          }
          std::vector<int32_t> c = i > 0 ? clock[k][i - 1] : std::vector<int32_t>(p, -1);
          if (src_index >= 0) {
            const auto& sc = clock[size_t(src.stage)][size_t(src_index)];
            for (size_t j = 0; j < p; ++j) c[j] = std::max(c[j], sc[j]);
          }
          c[k] = int32_t(i);
          clock[k][i] = std::move(c);
          ++next[k];
          progress = true;
        }
      }
    }
    for (size_t k = 0; k < p; ++k)
      if (next[k] != s.ops[k].size())
        throw std::invalid_argument("chunk_activation_slots: stage " + std::to_string(k) + " cannot run its op " +
                                    std::to_string(next[k]) + " (the schedule deadlocks; verify it first)");
  }

  int32_t at(int32_t stage, const PipelineOp& op) const {
    const auto it = index[size_t(stage)].find(key_of(op));
    if (it == index[size_t(stage)].end())
      throw std::invalid_argument("chunk_activation_slots: stage " + std::to_string(stage) + " has no op " +
                                  to_string(op) + " of chunk " + std::to_string(op.chunk));
    return it->second;
  }
  // The reader of what `op` of `stage` handed over (its destination) runs before
  // stage `stage`'s op `until` starts; true when nothing reads it.
  bool read_before(const PipelineSchedule& s, int32_t stage, const PipelineOp& op, const PipelineOp& until) const {
    const OpLink dst = op_destination(s, stage, op);
    if (dst.stage < 0) return true;
    const int32_t reader = at(dst.stage, dst.op);
    const int32_t rewrite = at(stage, until);
    // `until`'s clock covers its stage's earlier ops and its source's past; the reader
    // is never `until`'s source (another microbatch or chunk), so reaching it there
    // means it ran before `until` started.
    const auto& c = clock[size_t(stage)][size_t(rewrite)];
    return c[size_t(dst.stage)] >= reader && !(dst.stage == stage && reader >= rewrite);
  }
};

}  // namespace

namespace {

bool has_weight_ops(const std::vector<PipelineOp>& stage_ops) {
  return std::any_of(stage_ops.begin(), stage_ops.end(), [](const PipelineOp& op) { return op.kind == OpKind::Weight; });
}

}  // namespace

int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops, int32_t chunk) {
  const OpKind frees = has_weight_ops(stage_ops) ? OpKind::Weight : OpKind::Backward;
  int32_t live = 0, peak = 0;
  for (const auto& op : stage_ops) {
    if (op.chunk != chunk) continue;
    if (op.kind == OpKind::Forward) ++live;
    if (op.kind == frees) --live;
    peak = std::max(peak, live);
  }
  return peak;
}

std::vector<int32_t> chunk_activation_slots(const PipelineSchedule& s, int32_t stage) {
  if (stage < 0 || size_t(stage) >= s.ops.size())
    throw std::invalid_argument("chunk_activation_slots: stage " + std::to_string(stage) + " outside [0, " +
                                std::to_string(s.ops.size()) + ")");
  const HappensBefore hb(s);
  const int32_t m = s.microbatches;
  // The op after which a microbatch's saved activations are no longer read: its weight
  // pass under the split backward (ZB_H1), else its backward.
  const OpKind last_reader = has_weight_ops(s.ops[size_t(stage)]) ? OpKind::Weight : OpKind::Backward;
  std::vector<int32_t> out;
  for (int32_t c = 0; c < std::max(1, s.chunks); ++c) {
    auto F = [&](int32_t j) { return PipelineOp{OpKind::Forward, j, c}; };
    auto B = [&](int32_t j) { return PipelineOp{OpKind::Backward, j, c}; };
    auto done_with = [&](int32_t j) { return PipelineOp{last_reader, j, c}; };
    auto safe = [&](int32_t S) {
      for (int32_t j = S; j < m; ++j) {
        const int32_t old = j - S;
        if (hb.at(stage, done_with(old)) > hb.at(stage, F(j))) return false;  // its activations still needed
        if (!hb.read_before(s, stage, F(old), F(j))) return false;    // its output not yet copied
        if (!hb.read_before(s, stage, B(old), B(j))) return false;    // its input gradient not yet copied
      }
      return true;
    };
    int32_t S = std::max(1, peak_in_flight(s.ops[size_t(stage)], c));
    while (S < m && !safe(S)) ++S;
    out.push_back(std::min(std::max(S, 1), std::max(m, 1)));
  }
  return out;
}

}  // namespace troupe::sched
