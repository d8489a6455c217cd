// Recovery under the interleaved schedule: the recovery suite's DP2 x PP2 run with 4
// layers in 2 chunks a stage. A stage killed in a forward or a backward restarts the
// group from the latest checkpoint, a loader restarts alone; the run must end with
// the fault-free interleaved run's losses, weights and moments bitwise.
#include <doctest/doctest.h>

#include "engine/faults.h"
#include "test/actors/recovery_harness.h"
#include "test/support/same_state.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

Config interleaved_base(const std::string& name) {
  Config c = recovery::base(name);
  c.mutable_model()->set_layers(4);
  c.mutable_parallel()->set_schedule(ParallelConfig::INTERLEAVED_1F1B);
  c.mutable_parallel()->set_virtual_stages(2);
  return c;
}

}  // namespace

TEST_CASE("interleaved 1F1B: a stage or a loader killed mid-step recovers bitwise") {
  const auto clean = recovery::run(interleaved_base("interleaved-clean"));
  REQUIRE_MESSAGE(clean.outcome.status == "completed", clean.outcome.error);
  REQUIRE(clean.state);
  struct Case {
    const char* actor;
    Fault::Phase phase;
    int64_t step;
    int64_t group_restarts;
  };
  const Case cases[] = {
      {"stage/dp0/pp1/tp0", Fault::BACKWARD, 4, 1},  // the last stage: holds chunk 1, feeds stage 0
      {"stage/dp1/pp0/tp0", Fault::FORWARD, 3, 1},   // the first stage: takes the wrap-around
      {"loader/dp0", Fault::FORWARD, 4, 0},
  };
  int n = 0;
  for (const auto& k : cases) {
    CAPTURE(k.actor);
    Config c = interleaved_base("interleaved-kill-" + std::to_string(n++));
    *c.mutable_faults()->add_fault() = fault(k.actor, k.step, k.phase);
    const auto r = recovery::run(c);
    REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
    CHECK(r.restarts == k.group_restarts);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].actor == k.actor);
    REQUIRE(r.outcome.steps.size() == clean.outcome.steps.size());
    for (size_t s = 0; s < clean.outcome.steps.size(); ++s) {
      CAPTURE(s);
      CHECK(r.outcome.steps[s].loss == clean.outcome.steps[s].loss);
      CHECK(r.outcome.steps[s].grad_norm == clean.outcome.steps[s].grad_norm);
    }
    check_same_state(*r.state, *clean.state);
    CHECK(r.outcome.step_samples == clean.outcome.step_samples);
  }
}
