// The schedule verifier: every schedule troupe builds passes with its stated bounds,
// and broken op lists (ops swapped, dropped, duplicated) are refused with the first
// offending op and the rule it breaks.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "sched/pipeline_schedule.h"
#include "sched/schedule_verifier.h"

using namespace troupe;
using sched::OpKind;
using sched::PipelineOp;

namespace {

const ParallelConfig::Schedule kKinds[] = {ParallelConfig::GPIPE, ParallelConfig::ONE_F_ONE_B};

PipelineOp F(int j) { return {OpKind::Forward, j}; }
PipelineOp B(int j) { return {OpKind::Backward, j}; }

std::string error_of(const sched::PipelineSchedule& s, ParallelConfig::Schedule kind) {
  const auto r = sched::verify_schedule(s, kind);
  CHECK_FALSE(r.ok);
  return r.error;
}

// An independent check of rules 2 and 4 for the exhaustive mutation tests: each
// stage's list a permutation of the (microbatch, chunk) ops with B after F, and the
// timing simulation (which throws on a deadlock) gets through.
bool runs_through(const sched::PipelineSchedule& s) {
  const size_t slots = size_t(s.microbatches) * size_t(s.chunks);
  for (const auto& ops : s.ops) {
    std::vector<int> f(slots, 0), b(slots, 0);
    for (const auto& op : ops) {
      if (op.microbatch < 0 || op.microbatch >= s.microbatches || op.chunk < 0 || op.chunk >= s.chunks) return false;
      const size_t i = size_t(op.chunk) * size_t(s.microbatches) + size_t(op.microbatch);
      if (op.kind == OpKind::Forward) ++f[i];
      else if (f[i] == 0) return false;
      else ++b[i];
    }
    for (size_t i = 0; i < slots; ++i)
      if (f[i] != 1 || b[i] != 1) return false;
  }
  try {
    sched::simulate_schedule(s);
  } catch (const std::logic_error&) {
    return false;
  }
  return true;
}

// Every drop, duplicate and swap of two ops of one stage of `base`: a dropped or
// doubled op is refused as such; a swapped list is accepted exactly when it is still a
// permutation with B after F, FIFO on every channel, deadlock-free and within the
// bound. The independent check covers all but FIFO and the bound, so accepted => runs
// through, and runs through => accepted or refused for FIFO order or the bound only.
void judge_every_mutation(const sched::PipelineSchedule& base, ParallelConfig::Schedule kind) {
  for (int k = 0; k < base.stages; ++k) {
    const size_t n = base.ops[size_t(k)].size();
    for (size_t a = 0; a < n; ++a) {
      auto dropped = base;
      dropped.ops[size_t(k)].erase(dropped.ops[size_t(k)].begin() + long(a));
      CHECK(sched::verify_schedule(dropped, kind).error.find("never runs") != std::string::npos);
      auto doubled = base;
      doubled.ops[size_t(k)].insert(doubled.ops[size_t(k)].begin() + long(a), base.ops[size_t(k)][a]);
      CHECK(sched::verify_schedule(doubled, kind).error.find("runs twice") != std::string::npos);
      for (size_t b = a + 1; b < n; ++b) {
        auto s = base;
        std::swap(s.ops[size_t(k)][a], s.ops[size_t(k)][b]);
        const auto r = sched::verify_schedule(s, kind);
        const bool runs = runs_through(s);
        if (r.ok) CHECK(runs);
        if (!runs) CHECK_FALSE(r.ok);
        if (runs && !r.ok)
          CHECK((r.error.find("receives") != std::string::npos || r.error.find("in flight") != std::string::npos));
      }
    }
  }
}

}  // namespace

TEST_CASE("every built schedule verifies for p <= 16, m <= 64, with its in-flight bound reached") {
  for (auto kind : kKinds)
    for (int p = 1; p <= 16; ++p)
      for (int m = 1; m <= 64; ++m) {
        const auto s = sched::build_pipeline_schedule(kind, p, m);
        const auto r = sched::verify_schedule(s, kind);
        if (!r.ok) FAIL_CHECK("kind " << kind << " p " << p << " m " << m << ": " << r.error);
        REQUIRE(r.peak_in_flight.size() == size_t(p));
        for (int k = 0; k < p; ++k) {
          const int bound = kind == ParallelConfig::GPIPE ? m : std::min(p - k, m);
          CHECK(r.in_flight_bound[size_t(k)] == bound);
          CHECK(r.peak_in_flight[size_t(k)] == bound);  // the bound is tight
          CHECK(r.peak_buffered_activations[size_t(k)] <= sched::activation_buffer_bound(kind, p, k, m));
          CHECK(r.peak_buffered_gradients[size_t(k)] <= sched::gradient_buffer_bound(kind, p, k, m));
        }
        CHECK(r.peak_buffered_activations[0] == 0);
        CHECK(r.peak_buffered_gradients[size_t(p - 1)] == 0);
      }
}

TEST_CASE("buffered messages at their worst, by hand for p = 2, m = 4") {
  // GPipe: stage 0 can run all four forwards before stage 1 consumes one, and stage 1
  // all four backwards before stage 0 runs one.
  auto g = sched::verify_schedule(sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 4), ParallelConfig::GPIPE);
  REQUIRE(g.ok);
  CHECK(g.peak_buffered_activations == std::vector<int32_t>{0, 4});
  CHECK(g.peak_buffered_gradients == std::vector<int32_t>{4, 0});
  // 1F1B: stage 0 (F0 F1 B0 ...) runs F0 F1 and then needs B0; stage 1 (F0 B0 F1 B1
  // ...) can send B0 and B1 before stage 0 gets to B0.
  auto o = sched::verify_schedule(sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 4),
                                  ParallelConfig::ONE_F_ONE_B);
  REQUIRE(o.ok);
  CHECK(o.peak_in_flight == std::vector<int32_t>{2, 1});
  CHECK(o.peak_buffered_activations == std::vector<int32_t>{0, 2});
  CHECK(o.peak_buffered_gradients == std::vector<int32_t>{2, 0});
}

TEST_CASE("adjacent swaps that break a rule name the first offending op") {
  SUBCASE("backward before its forward") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 8);
    std::swap(s.ops[3][0], s.ops[3][1]);  // stage 3: F0 B0 -> B0 F0
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 3: B0 before F0");
  }
  SUBCASE("two forwards: the channel to the next stage is out of order") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 3, 4);
    std::swap(s.ops[0][0], s.ops[0][1]);
    CHECK(error_of(s, ParallelConfig::GPIPE) == "stage 1 receives F0 before F1 but stage 0 sends F1 first");
  }
  SUBCASE("two backwards of the last stage: the gradient channel is out of order") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 4, 4);
    std::swap(s.ops[3][4], s.ops[3][5]);  // B0 B1 -> B1 B0
    CHECK(error_of(s, ParallelConfig::GPIPE) == "stage 2 receives B0 before B1 but stage 3 sends B1 first");
  }
  SUBCASE("a backward moved before the last forward deadlocks") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 4);
    std::swap(s.ops[0][3], s.ops[0][4]);  // stage 0: F3 B0 -> B0 F3
    CHECK(error_of(s, ParallelConfig::GPIPE) ==
          "deadlock: stage 0 B0 waits for stage 1 B0, queued behind stage 1 F3; stage 1 F3 waits for stage 0 F3, "
          "queued behind stage 0 B0; and so on (stage 0 B0)");
  }
  SUBCASE("a forward moved ahead of a backward exceeds the 1F1B bound") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 4);
    REQUIRE(s.ops[0] == std::vector<PipelineOp>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)});
    std::swap(s.ops[0][2], s.ops[0][3]);  // F2 before B0
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) ==
          "stage 0 F2 puts 3 activations in flight, over the bound min(p - k, m) = 2");
    // The same lists are a fine GPipe-bounded schedule: the bound is the kind's.
    CHECK(sched::verify_schedule(s, ParallelConfig::GPIPE).ok);
  }
}

TEST_CASE("non-adjacent swaps that break a rule name the first offending op") {
  SUBCASE("backward far ahead of its forward") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 4);
    std::swap(s.ops[0][1], s.ops[0][5]);  // F1 <-> B1
    CHECK(error_of(s, ParallelConfig::GPIPE) == "stage 0: B1 before F1");
  }
  SUBCASE("forwards exchanged across the list") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 3, 4);
    std::swap(s.ops[1][0], s.ops[1][3]);  // stage 1: F3 F1 F2 F0
    CHECK(error_of(s, ParallelConfig::GPIPE) == "stage 1 receives F3 before F0 but stage 0 sends F0 first");
  }
  SUBCASE("a forward and a backward exchanged reorder the gradients") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 4);
    std::swap(s.ops[0][3], s.ops[0][5]);  // stage 0: F0 F1 F2 B1 B0 F3 B2 B3
    CHECK(error_of(s, ParallelConfig::GPIPE) == "stage 0 receives B1 before B0 but stage 1 sends B0 first");
  }
  SUBCASE("1F1B: a backward exchanged with a later forward") {
    auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 4);
    std::swap(s.ops[0][3], s.ops[0][6]);  // F2 <-> B2
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 0: B2 before F2");
  }
}

TEST_CASE("a dropped or duplicated op is refused") {
  auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 8);
  SUBCASE("dropped forward") {
    auto& ops = s.ops[2];
    ops.erase(std::find(ops.begin(), ops.end(), F(5)));
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 2 F5 never runs");
  }
  SUBCASE("dropped last backward") {
    s.ops[1].pop_back();
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 1 B7 never runs");
  }
  SUBCASE("duplicated forward") {
    auto& ops = s.ops[1];
    ops.insert(ops.begin() + 6, F(3));
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 1 F3 runs twice (ops 4 and 6)");
  }
  SUBCASE("duplicated backward at the end") {
    s.ops[3].push_back(B(0));
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 3 B0 runs twice (ops 1 and 16)");
  }
  SUBCASE("a microbatch out of range, a missing stage") {
    s.ops[0][0].microbatch = 8;
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "stage 0 F8 (op 0) names a microbatch outside [0, 8)");
    s.ops.pop_back();
    CHECK(error_of(s, ParallelConfig::ONE_F_ONE_B) == "3 op lists for 4 stages");
  }
}

TEST_CASE("exhaustively: every swap, drop and duplicate of small schedules is judged right") {
  for (auto kind : kKinds)
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 5; ++m) judge_every_mutation(sched::build_pipeline_schedule(kind, p, m), kind);
}

TEST_CASE("a broken list is refused at startup with the schedule named") {
  // run_training and every stage actor take their lists from
  // verified_pipeline_schedule, which throws this before any actor starts.
  auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 8);
  std::swap(s.ops[2][0], s.ops[2][1]);  // stage 2: F0 F1 -> F1 F0
  try {
    sched::require_valid_schedule(s, ParallelConfig::ONE_F_ONE_B);
    FAIL("accepted a broken schedule");
  } catch (const sched::ScheduleViolation& e) {
    CHECK(std::string(e.what()) == "pipeline schedule ONE_F_ONE_B (p = 4, m = 8, v = 1, every op chunk 0): "
                                   "stage 2 receives F1 before F0 but stage 1 sends F0 first");
  }
  CHECK_NOTHROW(sched::verified_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 8));
  CHECK(sched::verified_pipeline_schedule(ParallelConfig::GPIPE, 3, 5).ops ==
        sched::build_pipeline_schedule(ParallelConfig::GPIPE, 3, 5).ops);
}

TEST_CASE("the plan's verdict line") {
  const auto ok = sched::schedule_verdict_line(sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 8),
                                               ParallelConfig::ONE_F_ONE_B);
  CHECK(ok.find("pipeline schedule ONE_F_ONE_B verified (p = 4, m = 8, v = 1): in flight per stage 4 3 2 1 "
                "(bound min(p - k, m))") == 0);
  auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 2);
  s.ops[1].pop_back();
  CHECK(sched::schedule_verdict_line(s, ParallelConfig::GPIPE) ==
        "pipeline schedule GPIPE REFUSED (p = 2, m = 2): stage 1 B1 never runs");
}


TEST_CASE("interleaved 1F1B: every schedule for p <= 16, v <= 4, m <= 64 verifies with its in-flight bound reached") {
  const auto kind = ParallelConfig::ONE_F_ONE_B;
  int schedules = 0;
  for (int p = 2; p <= 16; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 64; m += p) {
        const auto s = sched::build_interleaved_schedule(p, m, v);
        REQUIRE(s.chunks == v);
        const auto r = sched::verify_schedule(s, kind);
        if (!r.ok) FAIL_CHECK("p " << p << " v " << v << " m " << m << ": " << r.error);
        REQUIRE(r.peak_in_flight.size() == size_t(p));
        for (int k = 0; k < p; ++k) {
          const int bound = std::min(2 * (p - k - 1) + (v - 1) * p + 1, m * v);
          CHECK(r.in_flight_bound[size_t(k)] == bound);
          CHECK(r.peak_in_flight[size_t(k)] == bound);  // the bound is tight
          CHECK(r.peak_buffered_activations[size_t(k)] <= sched::activation_buffer_bound(kind, p, k, m, v));
          CHECK(r.peak_buffered_gradients[size_t(k)] <= sched::gradient_buffer_bound(kind, p, k, m, v));
        }
        ++schedules;
      }
  MESSAGE(schedules << " interleaved schedules verified");
  // Sizes it does not build.
  CHECK_THROWS_AS(sched::build_interleaved_schedule(1, 4, 2), std::invalid_argument);
  CHECK_THROWS_AS(sched::build_interleaved_schedule(4, 6, 2), std::invalid_argument);
  CHECK_THROWS_AS(sched::build_interleaved_schedule(4, 8, 1), std::invalid_argument);
}

TEST_CASE("interleaved 1F1B: op order of p = 2, v = 2, m = 4, and its violations named with the chunk") {
  const auto s = sched::build_interleaved_schedule(2, 4, 2);
  auto text = [](const std::vector<PipelineOp>& ops) {
    std::string out;
    for (const auto& op : ops) out += sched::to_string(op) + "c" + std::to_string(op.chunk) + " ";
    return out;
  };
  // Stage 0: 2(p - 1) + (v - 1)p = 4 warm-up forwards (microbatches 0, 1 through chunk 0,
  // then through chunk 1), then one forward and one backward in turn; backwards start
  // with chunk 1 (the last virtual stage is stage 1's chunk 1).
  CHECK(text(s.ops[0]) == "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0 ");
  CHECK(text(s.ops[1]) == "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0 ");
  // Stage 1's chunk-0 forwards of microbatches 0 and 1 swapped: stage 1 receives them
  // out of the order stage 0 sent them (the named ops carry their chunk).
  auto swapped = s;
  std::swap(swapped.ops[1][0], swapped.ops[1][1]);
  CHECK(error_of(swapped, ParallelConfig::ONE_F_ONE_B) ==
        "stage 1 receives chunk 0 F1 before chunk 0 F0 but stage 0 sends chunk 0 F0 first");
  // Chunk 0's forwards of microbatches 2 and 3 swapped on both stages: the channel from
  // stage 0 to stage 1 stays in order, the wrap-around one from stage 1 (chunk 0) to
  // stage 0 (chunk 1) does not.
  auto wrapped = s;
  std::swap(wrapped.ops[0][4], wrapped.ops[0][6]);
  std::swap(wrapped.ops[1][6], wrapped.ops[1][8]);
  CHECK(error_of(wrapped, ParallelConfig::ONE_F_ONE_B) ==
        "stage 0 receives chunk 1 F2 before chunk 1 F3 but stage 1 sends chunk 0 F3 first");
  auto dropped = s;
  dropped.ops[0].erase(dropped.ops[0].begin() + 5);  // B0 of chunk 1
  CHECK(error_of(dropped, ParallelConfig::ONE_F_ONE_B) == "stage 0 chunk 1 B0 never runs");
  try {
    sched::require_valid_schedule(dropped, ParallelConfig::ONE_F_ONE_B);
    FAIL("refused nothing");
  } catch (const sched::ScheduleViolation& e) {
    CHECK(std::string(e.what()) == "pipeline schedule INTERLEAVED_1F1B (p = 2, m = 4, v = 2): stage 0 chunk 1 B0 never runs");
  }
  CHECK(sched::schedule_verdict_line(s, ParallelConfig::ONE_F_ONE_B)
            .find("pipeline schedule INTERLEAVED_1F1B verified (p = 2, m = 4, v = 2): in flight per stage 5 3 (bound "
                  "min(2(p - k - 1) + (v - 1)p + 1, m v))") == 0);
}

TEST_CASE("interleaved 1F1B, exhaustively: every swap, drop and duplicate of small schedules is judged right") {
  for (int p = 2; p <= 3; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 2 * p; m += p)
        judge_every_mutation(sched::build_interleaved_schedule(p, m, v), ParallelConfig::ONE_F_ONE_B);
}
