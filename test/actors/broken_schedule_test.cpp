// A deliberately broken op list (sched/schedule_mutation.h, test-only) injected into a
// real run_training start is refused there, naming the first offending op, before any
// actor runs (docs/runtime.md, "The schedule verifier"): not a hang at run time.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "actors/runtime.h"
#include "metrics/run_dir.h"
#include "sched/schedule_mutation.h"
#include "sched/schedule_verifier.h"
#include "test/actors/parity_check.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

// Sets the test-only mutation for its lifetime (unset however the test ends).
struct ScheduleMutationEnv {
  explicit ScheduleMutationEnv(const char* text) { REQUIRE(setenv(sched::kScheduleMutationEnv, text, 1) == 0); }
  ~ScheduleMutationEnv() { unsetenv(sched::kScheduleMutationEnv); }
};

}  // namespace

TEST_CASE("a deliberately broken op list is refused at startup, naming the first offending op") {
  Config c = with_steps(parity_layout(1, 2, "troupe-broken-schedule"), 2);
  std::filesystem::remove_all(c.logging().run_dir());
  actors::RunOptions o;
  o.console = false;
  o.timeout = std::chrono::seconds(60);  // a start that is not refused would not hang the suite either
  {
    // Stage 1 (the last) of 1F1B over 8 microbatches runs F0 B0 F1 B1 ...: swapped,
    // its first op is B0, before F0.
    const ScheduleMutationEnv env("swap 1 0 1");
    CHECK_THROWS_WITH_AS(actors::run_training(c, o), doctest::Contains("stage 1: B0 before F0"),
                         sched::ScheduleViolation);
  }
  {
    // Dropping an op: stage 0's last backward (op 15 of 16) never runs.
    const ScheduleMutationEnv env("drop 0 15");
    CHECK_THROWS_WITH_AS(actors::run_training(c, o), doctest::Contains("stage 0 B7 never runs"),
                         sched::ScheduleViolation);
  }
  // Refused before any actor ran: nothing was written to the run's directory.
  CHECK_FALSE(std::filesystem::exists(metrics::run_dir_layout(c.logging().run_dir()).metrics));
}
