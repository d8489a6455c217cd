// Pipeline schedules: the invariants every stage actor relies on, and the ideal idle
// fraction computed from the op lists themselves.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "sched/pipeline_schedule.h"

using namespace troupe;
using sched::OpKind;

namespace {

const ParallelConfig::Schedule kKinds[] = {ParallelConfig::GPIPE, ParallelConfig::ONE_F_ONE_B};

// Position of each op in its stage's list.
std::map<std::pair<OpKind, int>, size_t> positions(const std::vector<sched::PipelineOp>& ops) {
  std::map<std::pair<OpKind, int>, size_t> pos;
  for (size_t i = 0; i < ops.size(); ++i) pos[{ops[i].kind, ops[i].microbatch}] = i;
  return pos;
}

}  // namespace

TEST_CASE("every stage runs each microbatch once forward and once backward, forward first") {
  for (auto kind : kKinds)
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 4, 8, 12, 24}) {
        CAPTURE(kind); CAPTURE(p); CAPTURE(m);
        auto s = sched::build_pipeline_schedule(kind, p, m);
        REQUIRE(s.ops.size() == size_t(p));
        for (int k = 0; k < p; ++k) {
          REQUIRE(s.ops[k].size() == size_t(2 * m));
          auto pos = positions(s.ops[k]);
          REQUIRE(pos.size() == size_t(2 * m));  // no op repeated
          for (int i = 0; i < m; ++i)
            CHECK(pos.at({OpKind::Forward, i}) < pos.at({OpKind::Backward, i}));
        }
      }
}

TEST_CASE("stage k's forward of mb i follows stage k-1's; backward flows the other way") {
  // The simulated start times respect both data dependencies.
  for (auto kind : kKinds)
    for (int p : {2, 4, 8})
      for (int m : {1, 4, 8, 24}) {
        CAPTURE(kind); CAPTURE(p); CAPTURE(m);
        auto s = sched::build_pipeline_schedule(kind, p, m);
        auto t = sched::simulate_schedule(s, 1.0, 2.0);
        std::vector<std::map<std::pair<OpKind, int>, double>> start(p);
        for (int k = 0; k < p; ++k)
          for (size_t j = 0; j < s.ops[k].size(); ++j)
            start[k][{s.ops[k][j].kind, s.ops[k][j].microbatch}] = t.start[k][j];
        for (int k = 1; k < p; ++k)
          for (int i = 0; i < m; ++i) {
            CHECK(start[k][{OpKind::Forward, i}] >= start[k - 1][{OpKind::Forward, i}] + 1.0);
            CHECK(start[k - 1][{OpKind::Backward, i}] >= start[k][{OpKind::Backward, i}] + 2.0);
          }
      }
}

TEST_CASE("1F1B holds at most p-k activations on stage k; GPipe holds m") {
  for (int p : {2, 3, 4, 8})
    for (int m : {1, 2, 4, 8, 24}) {
      auto f1b1 = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, p, m);
      auto gpipe = sched::build_pipeline_schedule(ParallelConfig::GPIPE, p, m);
      for (int k = 0; k < p; ++k) {
        CAPTURE(p); CAPTURE(m); CAPTURE(k);
        CHECK(sched::peak_in_flight(f1b1.ops[k]) == std::min(p - k, m));
        CHECK(sched::peak_in_flight(gpipe.ops[k]) == m);
      }
    }
}

TEST_CASE("1F1B op order on a 4-stage pipeline with 6 microbatches") {
  auto s = sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 4, 6);
  auto str = [](const std::vector<sched::PipelineOp>& ops) {
    std::string out;
    for (auto& op : ops) out += sched::to_string(op) + " ";
    return out;
  };
  CHECK(str(s.ops[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  CHECK(str(s.ops[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 ");
  CHECK(str(s.ops[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
}

TEST_CASE("idle fraction from the op lists equals (p-1)/(m+p-1) for balanced stages") {
  for (auto kind : kKinds)
    for (int p : {1, 2, 4, 8})
      for (int m : {1, 8, 12, 24, 48}) {
        CAPTURE(kind); CAPTURE(p); CAPTURE(m);
        auto s = sched::build_pipeline_schedule(kind, p, m);
        for (double tb : {1.0, 2.0}) {
          auto t = sched::simulate_schedule(s, 1.0, tb);
          CHECK(t.idle_fraction == doctest::Approx(sched::ideal_idle_fraction(p, m)).epsilon(1e-12));
          CHECK(t.makespan == doctest::Approx((m + p - 1) * (1.0 + tb)));
        }
      }
  // The seed's table: p = 8 with 12 / 24 / 48 microbatches.
  CHECK(sched::ideal_idle_fraction(8, 12) == doctest::Approx(7.0 / 19.0));
  CHECK(sched::ideal_idle_fraction(8, 24) == doctest::Approx(7.0 / 31.0));
  CHECK(sched::ideal_idle_fraction(8, 48) == doctest::Approx(7.0 / 55.0));
  CHECK(sched::ideal_idle_fraction(2, 8) == doctest::Approx(1.0 / 9.0));
}

TEST_CASE("per-stage op times: the slower stage sets the makespan") {
  // Stage 1 takes twice as long as stage 0 (forward 1 / 2, backward 2 / 4). Stage 1
  // then runs without a gap from its first forward: makespan = f0 + m (f1 + b1) + b0.
  for (auto kind : kKinds)
    for (int m : {1, 4, 8}) {
      CAPTURE(kind); CAPTURE(m);
      const auto s = sched::build_pipeline_schedule(kind, 2, m);
      const auto t = sched::simulate_schedule(s, std::vector<double>{1.0, 2.0}, std::vector<double>{2.0, 4.0});
      CHECK(t.makespan == doctest::Approx(6.0 * m + 3.0));
      CHECK(t.idle_fraction == doctest::Approx(1.0 - 9.0 * m / (2.0 * (6.0 * m + 3.0))));
      // Equal per-stage times give the scalar simulation.
      const auto even = sched::simulate_schedule(s, std::vector<double>{1.0, 1.0}, std::vector<double>{2.0, 2.0});
      CHECK(even.makespan == doctest::Approx(sched::simulate_schedule(s, 1.0, 2.0).makespan));
    }
  const auto s = sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 4);
  CHECK_THROWS_AS(sched::simulate_schedule(s, std::vector<double>{1.0}, std::vector<double>{2.0, 2.0}),
                  std::invalid_argument);
}

TEST_CASE("bad schedule sizes are refused") {
  CHECK_THROWS_AS(sched::build_pipeline_schedule(ParallelConfig::GPIPE, 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(sched::build_pipeline_schedule(ParallelConfig::GPIPE, 2, 0), std::invalid_argument);
}

TEST_CASE("interleaved 1F1B: simulated idle against (p-1)/(vm+p-1), balanced chunks") {
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        const auto s = sched::build_interleaved_schedule(p, m, v);
        const double sim = sched::simulate_schedule(s).idle_fraction;
        const double ideal = sched::ideal_idle_fraction(p, m, v);
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        CHECK(sim == doctest::Approx(ideal).epsilon(1e-12));
        // Fewer bubbles than plain 1F1B of the same p and m.
        CHECK(sim < sched::ideal_idle_fraction(p, m));
      }
}
