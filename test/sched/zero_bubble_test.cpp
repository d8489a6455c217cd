// The zero-bubble schedule ZB-H1 (sched/pipeline_schedule.h): its op lists, its
// in-flight counts, its simulated idle against the closed form, and the verifier's
// rules for its weight passes (sched/schedule_verifier.h), with every swap, drop and
// duplicate of small schedules judged against an independent check.
//
// Tolerance, fixed before the first run: the simulated idle equals the closed form to
// 1e-12 absolute (with unit op times every start is an integer, so both sides are the
// same ratio of integers up to rounding).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "sched/pipeline_schedule.h"
#include "sched/schedule_verifier.h"

using namespace troupe;
using sched::OpKind;
using sched::PipelineOp;

namespace {

constexpr ParallelConfig::Schedule kZb = ParallelConfig::ZB_H1;

PipelineOp F(int j) { return {OpKind::Forward, j}; }
PipelineOp B(int j) { return {OpKind::Backward, j}; }
PipelineOp W(int j) { return {OpKind::Weight, j}; }

std::string error_of(const sched::PipelineSchedule& s, ParallelConfig::Schedule kind = kZb) {
  const auto r = sched::verify_schedule(s, kind);
  CHECK_FALSE(r.ok);
  return r.error;
}

std::string text(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const auto& op : ops) out += (out.empty() ? "" : " ") + sched::to_string(op);
  return out;
}

// An independent check of rules 2 (without the bounds) and 4: each stage runs F, B
// and W of every microbatch once, B after F, W after B, and the timing simulation
// (which throws on a deadlock) gets through.
bool runs_through(const sched::PipelineSchedule& s) {
  for (const auto& ops : s.ops) {
    std::vector<int> f(size_t(s.microbatches), 0), b = f, w = f;
    for (const auto& op : ops) {
      if (op.microbatch < 0 || op.microbatch >= s.microbatches) return false;
      const size_t i = size_t(op.microbatch);
      if (op.kind == OpKind::Forward) ++f[i];
      else if (op.kind == OpKind::Backward && f[i] == 0) return false;
      else if (op.kind == OpKind::Backward) ++b[i];
      else if (b[i] == 0) return false;
      else ++w[i];
    }
    for (size_t i = 0; i < size_t(s.microbatches); ++i)
      if (f[i] != 1 || b[i] != 1 || w[i] != 1) return false;
  }
  try {
    sched::simulate_schedule(s, 1.0, 1.0, 1.0);
  } catch (const std::logic_error&) {
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("ZB-H1 op order on 4 stages with 8 microbatches: the W's of stage k held back k places") {
  const auto s = sched::build_pipeline_schedule(kZb, 4, 8);
  CHECK(text(s.ops[0]) == "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  CHECK(text(s.ops[1]) == "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  CHECK(text(s.ops[2]) == "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
  CHECK(text(s.ops[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  CHECK(sched::to_string(W(3)) == "W3");
}

TEST_CASE("ZB-H1 verifies for every p <= 16, m <= 64: min(p, m) in flight to W, 1F1B's min(p - k, m) to B") {
  for (int p = 1; p <= 16; ++p)
    for (int m = 1; m <= 64; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const auto s = sched::build_pipeline_schedule(kZb, p, m);
      const auto r = sched::verify_schedule(s, kZb);
      if (!r.ok) FAIL_CHECK(r.error);
      REQUIRE(r.peak_in_flight.size() == size_t(p));
      for (int k = 0; k < p; ++k) {
        const auto& ops = s.ops[size_t(k)];
        CHECK(r.in_flight_bound[size_t(k)] == std::min(p, m));
        CHECK(r.peak_in_flight[size_t(k)] == std::min(p, m));  // tight at every stage
        CHECK(sched::backward_bound(kZb, p, k, m) == std::min(p - k, m));
        CHECK(sched::peak_awaiting_backward(ops) == std::min(p - k, m));  // 1F1B's, tight
        CHECK(r.peak_buffered_activations[size_t(k)] <= sched::activation_buffer_bound(kZb, p, k, m));
        CHECK(r.peak_buffered_gradients[size_t(k)] <= sched::gradient_buffer_bound(kZb, p, k, m));
        // W's in microbatch order, and W neither sends nor receives.
        int next_w = 0;
        for (const auto& op : ops)
          if (op.kind == OpKind::Weight) {
            CHECK(op.microbatch == next_w++);
            CHECK(sched::op_source(s, k, op).stage == -1);
            CHECK(sched::op_destination(s, k, op).stage == -1);
          }
        CHECK(next_w == m);
      }
    }
}

TEST_CASE("ZB-H1 simulated idle equals its closed form, a third of 1F1B's bubble, for p <= 16, m <= 64") {
  // F = B = W = 1 unit; 1F1B's whole backward is B + W = 2 units.
  for (int p = 1; p <= 16; ++p)
    for (int m = 1; m <= 64; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const auto zb = sched::simulate_schedule(sched::build_pipeline_schedule(kZb, p, m), 1.0, 1.0, 1.0);
      CHECK(std::abs(zb.idle_fraction - sched::zero_bubble_idle_fraction(p, m)) <= 1e-12);
      if (m >= p) {
        const auto f1b1 = sched::simulate_schedule(sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, p, m));
        CHECK(zb.makespan - 3 * m == p - 1);        // (p - 1)(T_F + T_B - T_W)
        CHECK(f1b1.makespan - 3 * m == 3 * (p - 1));  // (p - 1)(T_F + T_B + T_W)
      } else {
        CHECK(zb.makespan == 2 * (m + p) - 1);  // the pipeline never fills (pipeline_schedule.h)
      }
    }
  CHECK(sched::zero_bubble_idle_fraction(4, 8) == doctest::Approx(3.0 / 27.0));
}

TEST_CASE("simulate_schedule: a weight pass takes weight_time after its own stage's B") {
  const auto s = sched::build_pipeline_schedule(kZb, 2, 2);
  REQUIRE(text(s.ops[0]) == "F0 F1 B0 W0 B1 W1");
  REQUIRE(text(s.ops[1]) == "F0 B0 F1 B1 W0 W1");
  const auto t = sched::simulate_schedule(s, 1.0, 1.0, 3.0);
  // stage 1: F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5] W0 [5,8] W1 [8,11]
  CHECK(t.start[1] == std::vector<double>{1, 2, 3, 4, 5, 8});
  // stage 0: F0 [0,1] F1 [1,2] B0 [3,4] W0 [4,7] B1 [7,8] W1 [8,11]
  CHECK(t.start[0] == std::vector<double>{0, 1, 3, 4, 7, 8});
  CHECK(t.makespan == 11);
  CHECK_THROWS_AS(sched::simulate_schedule(s, {1.0, 1.0}, {1.0, 1.0}, {1.0}), std::invalid_argument);
}

TEST_CASE("ZB-H1 violations name the first offending op") {
  auto s = sched::build_pipeline_schedule(kZb, 4, 8);
  SUBCASE("W before its B") {
    std::swap(s.ops[0][4], s.ops[0][5]);  // B0 W0 -> W0 B0
    CHECK(error_of(s) == "stage 0: W0 before B0");
  }
  SUBCASE("W dropped, duplicated") {
    s.ops[1].pop_back();
    CHECK(error_of(s) == "stage 1 W7 never runs");
    s.ops[1].push_back(W(7));
    s.ops[2].push_back(W(3));
    CHECK(error_of(s) == "stage 2 W3 runs twice (ops 16 and 24)");
  }
  SUBCASE("a forward past min(p, m) in flight to W") {
    auto& ops = s.ops[1];  // F0 F1 F2 B0 F3 B1 W0 F4 ...: F4 before W0
    std::swap(ops[6], ops[7]);
    CHECK(error_of(s) == "stage 1 F4 puts 5 activations in flight, over the bound min(p, m) = 4");
  }
  SUBCASE("a forward past min(p - k, m) awaiting B") {
    auto& ops = s.ops[3];  // F0 B0 F1 ...: F1 before B0
    std::swap(ops[1], ops[2]);
    CHECK(error_of(s) ==
          "stage 3 F1 puts 2 activations in flight before their input-gradient pass, over the bound min(p - k, m) = 1");
  }
  SUBCASE("a weight pass in another kind's list") {
    auto f1b1 = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 4);
    f1b1.ops[1].push_back(W(0));
    CHECK(error_of(f1b1, ParallelConfig::ONE_F_ONE_B) == "stage 1 W0 (op 8) is a weight pass, which only ZB_H1 runs");
  }
  SUBCASE("refused at startup with the schedule named") {
    s.ops[2].pop_back();
    CHECK_THROWS_WITH_AS(sched::require_valid_schedule(s, kZb),
                         "pipeline schedule ZB_H1 (p = 4, m = 8, v = 1, every op chunk 0): stage 2 W7 never runs",
                         sched::ScheduleViolation);
  }
}

TEST_CASE("ZB-H1, exhaustively: every swap, drop and duplicate of small schedules is judged right") {
  // A dropped or doubled op is refused as such; a swapped list is accepted exactly when
  // it still runs F, B, W once each in order, FIFO on every channel, deadlock-free and
  // within both bounds: accepted => runs through, and runs through => accepted or
  // refused for FIFO order or a bound only.
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 5; ++m) {
      const auto base = sched::build_pipeline_schedule(kZb, p, m);
      for (int k = 0; k < p; ++k) {
        const size_t n = base.ops[size_t(k)].size();
        for (size_t a = 0; a < n; ++a) {
          auto dropped = base;
          dropped.ops[size_t(k)].erase(dropped.ops[size_t(k)].begin() + long(a));
          CHECK(sched::verify_schedule(dropped, kZb).error.find("never runs") != std::string::npos);
          auto doubled = base;
          doubled.ops[size_t(k)].insert(doubled.ops[size_t(k)].begin() + long(a), base.ops[size_t(k)][a]);
          CHECK(sched::verify_schedule(doubled, kZb).error.find("runs twice") != std::string::npos);
          for (size_t b = a + 1; b < n; ++b) {
            auto s = base;
            std::swap(s.ops[size_t(k)][a], s.ops[size_t(k)][b]);
            const auto r = sched::verify_schedule(s, kZb);
            const bool runs = runs_through(s);
            if (r.ok) CHECK(runs);
            if (!runs) CHECK_FALSE(r.ok);
            if (runs && !r.ok)
              CHECK((r.error.find("receives") != std::string::npos || r.error.find("in flight") != std::string::npos));
          }
        }
      }
    }
}
