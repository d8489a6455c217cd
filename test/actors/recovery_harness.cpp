// The recovery suites' shared pieces (test/actors/recovery_harness.h).
#include "test/actors/recovery_harness.h"

#include <filesystem>
#include <set>

#include <doctest/doctest.h>

#include "test/actors/parity_check.h"
#include "test/support/scratch_dir.h"
#include "test/support/tiny_runtime_config.h"

namespace troupe::testing::recovery {

namespace fs = std::filesystem;

// test/support/tiny_runtime_config.h with 2 layers on DP2 x PP2 and seed 11, 6 updates
// of 8 samples, a checkpoint every 2 updates, into a fresh run directory per test.
Config base(const std::string& name, int steps) {
  Config c = tiny_runtime_config(2, 2, 2);
  c.mutable_lr_schedule()->set_decay_samples(48);  // fixed, so shorter runs share the schedule
  c.mutable_training()->set_train_samples(int64_t(steps) * 8);
  c.mutable_training()->set_seed(11);
  c.mutable_checkpoint()->set_interval_steps(2);
  c.mutable_checkpoint()->set_keep_last(10);
  // Each checkpoint committed before the next step starts: the faults below are planned
  // against complete checkpoints whatever the machine's load (the writers run at the
  // lowest priority, so on a busy machine a write can trail by several steps and a
  // group that fails meanwhile abandons it). The overlap itself: runtime_bench.
  c.mutable_checkpoint()->set_max_lag_steps(0);
  c.mutable_supervision()->set_max_restarts(3);
  c.mutable_supervision()->set_step_watchdog_s(30);
  c.mutable_logging()->set_run_dir(fresh_temp_dir("recovery-" + name).string());
  return c;
}

actors::RunResult run(const Config& c) {
  actors::RunOptions o;
  o.console = false;
  o.collect_state = true;
  o.timeout = std::chrono::seconds(120);
  return actors::run_training(c, o);
}

// The fault-free run every faulty one must reproduce bit for bit.
const actors::RunResult& clean() {
  static const actors::RunResult r = run(base("clean"));
  return r;
}

void check_identical_to_clean(const actors::RunResult& r) {
  const auto& ref = clean();
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  REQUIRE(r.state);
  REQUIRE(r.outcome.steps.size() == ref.outcome.steps.size());
  for (size_t s = 0; s < ref.outcome.steps.size(); ++s) {
    CAPTURE(s);
    CHECK(r.outcome.steps[s].step == ref.outcome.steps[s].step);
    CHECK(r.outcome.steps[s].loss == ref.outcome.steps[s].loss);
    CHECK(r.outcome.steps[s].lr == ref.outcome.steps[s].lr);
    CHECK_FALSE(r.outcome.steps[s].skipped);
  }
  testing::check_same_state(r, ref);
  // The sample audit: the final timeline's updates read exactly the clean run's
  // samples, each in one update, none skipped.
  CHECK(r.outcome.step_samples == ref.outcome.step_samples);
  std::multiset<int64_t> seen;
  for (const auto& ids : r.outcome.step_samples) seen.insert(ids.begin(), ids.end());
  for (int64_t id : seen) CHECK(seen.count(id) == 1);
  CHECK(seen.size() == 6 * 8);
}

}  // namespace troupe::testing::recovery
