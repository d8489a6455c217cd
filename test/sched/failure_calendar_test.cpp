// sched/failure_calendar: the kept fraction of wall time under failures, the best
// checkpoint interval, and the model against a simulated timeline with failures drawn
// at the same rate. Tolerances, fixed before the runs: the formulas to 1e-12 relative
// (they are arithmetic); the model against the simulation within 0.005 of kept
// fraction (its first-order error at tau / M = 0.04 is about (tau / M)^2 / 2 < 0.001,
// the simulation's sampling error over about 5,000 failures below 0.001).
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "sched/failure_calendar.h"

using namespace troupe::sched;

namespace {

// A cluster failing every 10 h, 10 s steps, a save stalling 30 s, 600 s to recover.
FailureModel ten_hours(Recovery r = Recovery::Restart) {
  FailureModel m;
  m.mtbf_s = 36000;
  m.save_stall_s = 30;
  m.recovery_s = 600;
  m.step_s = 10;
  m.recovery = r;
  return m;
}

}  // namespace

TEST_CASE("the cluster's mean time between failures from a rate per GPU-hour") {
  // Llama 3: 419 interruptions in 54 days on 16,384 GPUs.
  const double rate = 419.0 / (54.0 * 24.0 * 16384.0);
  CHECK(mtbf_seconds(rate, 16384) == doctest::Approx(54.0 * 24.0 * 3600.0 / 419.0).epsilon(1e-12));
  // The seed's 5,120 GPUs fail 3.2 times less often.
  CHECK(mtbf_seconds(rate, 5120) == doctest::Approx(54.0 * 24.0 * 3600.0 / 419.0 * 16384.0 / 5120.0).epsilon(1e-12));
  CHECK_THROWS_AS(mtbf_seconds(0, 8), std::invalid_argument);
  CHECK_THROWS_AS(mtbf_seconds(1e-5, 0), std::invalid_argument);
}

TEST_CASE("the kept fraction of a checkpoint interval, by hand") {
  const FailureCost f = failure_cost(ten_hours(), 100);
  CHECK(f.interval_s == 1000);
  CHECK(f.lost_per_failure_s == doctest::Approx(600 + 1030.0 / 2).epsilon(1e-12));
  CHECK(f.save_fraction == doctest::Approx(30.0 / 1030).epsilon(1e-12));
  CHECK(f.failure_fraction == doctest::Approx(1115.0 / 36000).epsilon(1e-12));
  CHECK(f.efficiency == doctest::Approx(1000.0 / 1030 * (1 - 1115.0 / 36000)).epsilon(1e-12));
  // ELASTIC redoes half a step, whatever the interval.
  const FailureCost e = failure_cost(ten_hours(Recovery::Elastic), 100);
  CHECK(e.lost_per_failure_s == doctest::Approx(605).epsilon(1e-12));
  CHECK(e.efficiency == doctest::Approx(1000.0 / 1030 * (1 - 605.0 / 36000)).epsilon(1e-12));
  // Failures that take all the time leave nothing.
  FailureModel hopeless = ten_hours();
  hopeless.mtbf_s = 500;
  CHECK(failure_cost(hopeless, 100).efficiency == 0);
  CHECK_THROWS_AS(failure_cost(ten_hours(), 0), std::invalid_argument);
}

TEST_CASE("the best interval is a whole number of steps near Daly's, and beats its neighbours") {
  const FailureModel m = ten_hours();
  CHECK(daly_interval_s(m) == doctest::Approx(std::sqrt(2.0 * 30 * 36000) - 30).epsilon(1e-12));
  const FailureCost best = best_interval(m);
  CHECK(std::abs(double(best.interval_steps) - daly_interval_s(m) / m.step_s) <= 15);
  for (const int64_t k : {best.interval_steps - 1, best.interval_steps + 1, best.interval_steps / 2,
                          best.interval_steps * 2, int64_t(1), int64_t(10000)})
    CHECK(failure_cost(m, k).efficiency <= best.efficiency);
  CHECK_THROWS_AS(best_interval(ten_hours(Recovery::Elastic)), std::invalid_argument);
  // Saves that cost nothing: checkpoint every step.
  FailureModel free_saves = m;
  free_saves.save_stall_s = 0;
  CHECK(best_interval(free_saves).interval_steps == 1);
}

TEST_CASE("the model against a simulated timeline with failures at the same rate") {
  const FailureModel m = ten_hours();
  const FailureCost best = best_interval(m);
  const double horizon = 2e8;  // about 5,500 failures
  const double at_best = simulated_efficiency(m, best.interval_steps, horizon, 11);
  CHECK(std::abs(at_best - best.efficiency) <= 0.005);
  // The interval the model calls best keeps more in the simulation too than a third
  // or three times of it.
  for (const int64_t k : {best.interval_steps / 3, best.interval_steps * 3}) {
    CAPTURE(k);
    const double sim = simulated_efficiency(m, k, horizon, 11);
    CHECK(std::abs(sim - failure_cost(m, k).efficiency) <= 0.005);
    CHECK(sim < at_best);
  }
  // ELASTIC: only the step in flight is redone.
  const FailureModel e = ten_hours(Recovery::Elastic);
  const double sim_e = simulated_efficiency(e, 144, 1e8, 12);
  CHECK(std::abs(sim_e - failure_cost(e, 144).efficiency) <= 0.005);
  CHECK(sim_e > at_best);
  // The same seed, the same timeline.
  CHECK(simulated_efficiency(m, 144, 1e7, 5) == simulated_efficiency(m, 144, 1e7, 5));
}
