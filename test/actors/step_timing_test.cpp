// Step records are dated by the stages, not by when the coordinator closes a step. With
// the next step handed over ahead, a stage holds the previous step's StageDone until the
// next step's ops end (docs/runtime.md), so closes come a step late, and early around
// checkpoints; a step's time must still run from the end of the previous update on the
// stages (or from when the step went out, when that is later) to the end of its own.
#include <doctest/doctest.h>

#include <algorithm>

#include "actors/runtime.h"
#include "test/actors/parity_check.h"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("a step's record is dated by its stages' update ends, whatever the coordinator's closes") {
  // PP2 so that the end is the later of two stages; checkpoints at steps 3 and 6, whose
  // StageDone is never held (their saves start at the close). A checkpoint may lag by
  // more steps than the run has, so none holds a step back: every step from 2 on goes
  // out ahead, whatever the machine's load lets the writers do meanwhile.
  Config c = with_steps(parity_layout(1, 2, "troupe-step-timing-test"), 8);
  c.mutable_checkpoint()->set_interval_steps(3);
  c.mutable_checkpoint()->set_max_lag_steps(8);
  const auto r = run(c);
  const auto& steps = r.outcome.steps;
  REQUIRE(steps.size() == 8);
  REQUIRE(r.outcome.step_timings.size() == 8);
  int from_previous_end = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(steps[i].step);
    double end = 0;
    for (const auto& t : r.outcome.step_timings[i]) {
      CHECK(t.end_time > 0);
      end = std::max(end, t.end_time);
    }
    CHECK(steps[i].wall_time == end);
    CHECK(steps[i].step_time_s > 0);
    if (i == 0) continue;
    // No step starts before the previous one ended; one handed over ahead runs from
    // that end exactly.
    const double since_previous = steps[i].wall_time - steps[i - 1].wall_time;
    CHECK(since_previous > 0);
    CHECK(steps[i].step_time_s <= since_previous);
    if (steps[i].step_time_s == since_previous) ++from_previous_end;
  }
  // Steps 2-8 all go out ahead (nothing holds them back), so each runs from the end of
  // the previous one exactly.
  CHECK(from_previous_end == 7);
}
