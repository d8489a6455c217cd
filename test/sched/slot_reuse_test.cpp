// sched/slot_reuse.h: the slots each model chunk needs, proven from the op lists, are
// checked against executions of the schedule that track what every slot holds.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sched/activation_memory.h"
#include "sched/pipeline_schedule.h"
#include "sched/slot_reuse.h"

using namespace troupe;
using namespace troupe::sched;

namespace {

// Runs s in a random order the waits allow (each op once its stage's previous op and
// its source have run), with slots[k][c] round-robin slots for stage k's chunk c, and
// returns the first read of an overwritten slot ("" when none): a forward reads its
// source's output, a backward its source's input gradient, and a backward and a weight
// pass (ZB_H1) their own stage's saved activations of the same microbatch.
std::string first_stale_read(const PipelineSchedule& s, const std::vector<std::vector<int32_t>>& slots,
                             uint32_t seed) {
  const size_t p = s.ops.size();
  const int32_t v = s.chunks;
  // owner[k][c][slot]: the microbatch whose output / input gradient / activations it holds.
  auto table = [&] {
    std::vector<std::vector<std::vector<int32_t>>> t(p);
    for (size_t k = 0; k < p; ++k) {
      t[k].resize(size_t(v));
      for (int32_t c = 0; c < v; ++c) t[k][size_t(c)].assign(size_t(slots[k][size_t(c)]), -1);
    }
    return t;
  };
  auto out = table(), dinput = table(), saved = table();
  auto at = [&](auto& t, size_t k, const PipelineOp& op) -> int32_t& {
    return t[k][size_t(op.chunk)][size_t(op.microbatch % slots[k][size_t(op.chunk)])];
  };
  std::vector<size_t> next(p, 0);
  std::vector<std::vector<bool>> done(p);
  for (size_t k = 0; k < p; ++k) done[k].assign(s.ops[k].size(), false);
  auto index_of = [&](int32_t k, const PipelineOp& op) {
    for (size_t i = 0; i < s.ops[size_t(k)].size(); ++i)
      if (s.ops[size_t(k)][i] == op) return i;
    return size_t(-1);
  };
  std::mt19937 rng(seed);
  for (;;) {
    std::vector<size_t> ready;
    for (size_t k = 0; k < p; ++k) {
      if (next[k] >= s.ops[k].size()) continue;
      const OpLink src = op_source(s, int32_t(k), s.ops[k][next[k]]);
      if (src.stage < 0 || done[size_t(src.stage)][index_of(src.stage, src.op)]) ready.push_back(k);
    }
    if (ready.empty()) break;
    const size_t k = ready[rng() % ready.size()];
    const PipelineOp op = s.ops[k][next[k]];
    const OpLink src = op_source(s, int32_t(k), op);
    const std::string where = "stage " + std::to_string(k) + " chunk " + std::to_string(op.chunk) + " " + to_string(op);
    if (op.kind == OpKind::Weight) {
      if (at(saved, k, op) != op.microbatch) return where + " finds its activations overwritten";
      done[k][next[k]++] = true;
      continue;
    }
    if (src.stage >= 0) {
      auto& t = op.kind == OpKind::Forward ? out : dinput;
      if (at(t, size_t(src.stage), src.op) != src.op.microbatch) return where + " reads an overwritten slot";
    }
    if (op.kind == OpKind::Forward) {
      at(out, k, op) = op.microbatch;
      at(saved, k, op) = op.microbatch;
    } else {
      if (at(saved, k, op) != op.microbatch) return where + " finds its activations overwritten";
      at(dinput, k, op) = op.microbatch;
    }
    done[k][next[k]++] = true;
  }
  for (size_t k = 0; k < p; ++k)
    if (next[k] != s.ops[k].size()) return "stage " + std::to_string(k) + " deadlocked";
  return "";
}

std::vector<std::vector<int32_t>> all_slots(const PipelineSchedule& s) {
  std::vector<std::vector<int32_t>> slots;
  for (int32_t k = 0; k < s.stages; ++k) slots.push_back(chunk_activation_slots(s, k));
  return slots;
}

}  // namespace

TEST_CASE("1F1B, p = 2, m = 4, by hand: stage 0 needs 2 slots, stage 1 needs 2") {
  // Stage 0: F0 F1 B0 F2 B1 F3 B2 B3; stage 1: F0 B0 F1 B1 F2 B2 F3 B3. Stage 0 holds at
  // most 2; F2 rewrites F0's slot after B0, whose gradient came from stage 1's B0, which
  // ran after stage 1 copied F0's output: 2 suffice. Stage 1 holds 1, but its B1 would
  // rewrite the input gradient of B0 that stage 0's B0 may not have read yet: 2.
  const auto s = build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 4);
  CHECK(chunk_activation_slots(s, 0) == std::vector<int32_t>{2});
  CHECK(chunk_activation_slots(s, 1) == std::vector<int32_t>{2});
  CHECK(first_stale_read(s, {{2}, {2}}, 1).empty());
  // One slot on stage 1 is unsafe: some execution reads a rewritten input gradient.
  bool found = false;
  for (uint32_t seed = 0; seed < 64 && !found; ++seed) found = !first_stale_read(s, {{2}, {1}}, seed).empty();
  CHECK(found);
}

TEST_CASE("GPipe and 1F1B: the proven slots never exceed the rule the runtime allocates") {
  for (auto kind : {ParallelConfig::GPIPE, ParallelConfig::ONE_F_ONE_B})
    for (int32_t p = 1; p <= 8; ++p)
      for (int32_t m = 1; m <= 16; ++m) {
        CAPTURE(p);
        CAPTURE(m);
        const auto s = build_pipeline_schedule(kind, p, m);
        for (int32_t k = 0; k < p; ++k) {
          const auto got = chunk_activation_slots(s, k);
          REQUIRE(got.size() == 1);
          CHECK(got[0] >= std::max(1, peak_in_flight(s.ops[size_t(k)])));
          CHECK(got[0] <= activation_slots(kind, peak_in_flight(s.ops[size_t(k)]), m));
        }
      }
}

TEST_CASE("interleaved: the proven slots per chunk survive random executions") {
  for (int32_t p = 2; p <= 4; ++p)
    for (int32_t v = 2; v <= 3; ++v)
      for (int32_t m = p; m <= 3 * p; m += p) {
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        const auto s = build_interleaved_schedule(p, m, v);
        const auto slots = all_slots(s);
        for (int32_t k = 0; k < p; ++k)
          for (int32_t c = 0; c < v; ++c) {
            CHECK(slots[size_t(k)][size_t(c)] >= std::max(1, peak_in_flight(s.ops[size_t(k)], c)));
            CHECK(slots[size_t(k)][size_t(c)] <= m);
          }
        for (uint32_t seed = 0; seed < 16; ++seed) CHECK(first_stale_read(s, slots, seed) == "");
      }
}

TEST_CASE("ZB-H1: a slot stays taken until the weight pass; the proven slots survive random executions") {
  // p = 2, m = 4. Stage 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3; stage 1: F0 B0 F1 B1 W0
  // F2 B2 W1 F3 B3 W2 W3. Stage 1 has one microbatch awaiting B but two awaiting W
  // (F1 runs before W0): 2 slots, and 1 (a count to B) lets F1 rewrite what W0 reads.
  const auto s2 = build_pipeline_schedule(ParallelConfig::ZB_H1, 2, 4);
  CHECK(chunk_activation_slots(s2, 0) == std::vector<int32_t>{2});
  CHECK(chunk_activation_slots(s2, 1) == std::vector<int32_t>{2});
  CHECK(peak_awaiting_backward(s2.ops[1]) == 1);
  CHECK(first_stale_read(s2, {{2}, {2}}, 1).empty());
  CHECK(first_stale_read(s2, {{2}, {1}}, 1) == "stage 1 chunk 0 W0 finds its activations overwritten");
  for (int32_t p = 2; p <= 6; ++p)
    for (int32_t m = 1; m <= 12; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const auto s = build_pipeline_schedule(ParallelConfig::ZB_H1, p, m);
      const auto slots = all_slots(s);
      for (int32_t k = 0; k < p; ++k) {
        const int32_t to_weight = peak_in_flight(s.ops[size_t(k)]);
        CHECK(slots[size_t(k)][0] >= std::max(1, to_weight));
        CHECK(slots[size_t(k)][0] <= activation_slots(ParallelConfig::ZB_H1, to_weight, m));
      }
      for (uint32_t seed = 0; seed < 16; ++seed) CHECK(first_stale_read(s, slots, seed) == "");
    }
}

TEST_CASE("an evaluation pass's forward order: microbatch order, or groups of p through each chunk") {
  std::vector<PipelineOp> plain;
  for (int32_t j = 0; j < 5; ++j) plain.push_back({OpKind::Forward, j, 0});
  CHECK(forward_pass_order(3, 5, 1) == plain);
  const std::vector<PipelineOp> want{{OpKind::Forward, 0, 0}, {OpKind::Forward, 1, 0}, {OpKind::Forward, 0, 1},
                                     {OpKind::Forward, 1, 1}, {OpKind::Forward, 2, 0}, {OpKind::Forward, 2, 1}};
  CHECK(forward_pass_order(2, 3, 2) == want);
}
