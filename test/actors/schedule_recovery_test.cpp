// Recovery under the interleaved and the zero-bubble schedules: the recovery suite's
// DP2 x PP2 run with 4 layers, in 2 chunks a stage (INTERLEAVED_1F1B) or with split
// backwards (ZB_H1). A stage killed in a forward or a backward restarts the group from
// the latest checkpoint, a loader restarts alone; the run must end with the fault-free
// run's losses, gradient norms, weights and moments bitwise, and the same samples.
#include <doctest/doctest.h>

#include "engine/faults.h"
#include "test/actors/recovery_harness.h"
#include "test/support/same_state.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

Config scheduled_base(const std::string& name, ParallelConfig::Schedule schedule) {
  Config c = recovery::base(name);
  c.mutable_model()->set_layers(4);
  c.mutable_parallel()->set_schedule(schedule);
  if (schedule == ParallelConfig::INTERLEAVED_1F1B) c.mutable_parallel()->set_virtual_stages(2);
  return c;
}

struct Kill {
  const char* actor;
  Fault::Phase phase;
  int64_t step;
  int64_t group_restarts;
};

void check_recovers(ParallelConfig::Schedule schedule, const std::vector<Kill>& kills) {
  const std::string name = ParallelConfig::Schedule_Name(schedule);
  const auto clean = recovery::run(scheduled_base(name + "-clean", schedule));
  REQUIRE_MESSAGE(clean.outcome.status == "completed", clean.outcome.error);
  REQUIRE(clean.state);
  int n = 0;
  for (const auto& k : kills) {
    CAPTURE(k.actor);
    Config c = scheduled_base(name + "-kill-" + std::to_string(n++), schedule);
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

}  // namespace

TEST_CASE("interleaved 1F1B: a stage or a loader killed mid-step recovers bitwise") {
  check_recovers(ParallelConfig::INTERLEAVED_1F1B,
                 {
                     {"stage/dp0/pp1/tp0", Fault::BACKWARD, 4, 1},  // the last stage: holds chunk 1, feeds stage 0
                     {"stage/dp1/pp0/tp0", Fault::FORWARD, 3, 1},   // the first stage: takes the wrap-around
                     {"loader/dp0", Fault::FORWARD, 4, 0},
                 });
}

TEST_CASE("ZB-H1: a stage killed in its split backward or its forward, or a loader, recovers bitwise") {
  check_recovers(ParallelConfig::ZB_H1,
                 {
                     {"stage/dp0/pp0/tp0", Fault::BACKWARD, 4, 1},  // the first stage: weight passes still pending
                     {"stage/dp1/pp1/tp0", Fault::FORWARD, 3, 1},
                     {"loader/dp1", Fault::FORWARD, 4, 0},
                 });
}
