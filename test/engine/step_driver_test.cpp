// engine::StepDriver, the coordinator's decisions, driven event by event without
// actors: every transition of docs/runtime.md's table (the step driver) and the
// interleavings the runtime tests reach only by timing (running ahead, a checkpoint
// that lags or holds a step, evaluations, stops, failed and timed-out saves). Time is a
// value here, so nothing depends on the machine.
#include <doctest/doctest.h>

#include <csignal>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/derived.h"
#include "engine/optimizer_shard.h"
#include "engine/spike_guard.h"
#include "metrics/json_records.h"
#include "engine/step_driver.h"
#include "engine/topology.h"

using namespace troupe;
using namespace troupe::engine;
using Lines = std::vector<std::string>;

namespace {

const std::string kOptim0 = optim_path({0, 0, 0}), kOptim1 = optim_path({0, 1, 0});
const std::string kWriter0 = writer_path({0, 0, 0}), kWriter1 = writer_path({0, 1, 0});

// PP2 (two shards, each writing), 6 steps of 2 microbatches, a global batch of 8; no
// checkpoints, no evaluation unless a case sets them.
StepDriverConfig six_steps() {
  StepDriverConfig c;
  c.total_steps = 6;
  c.microbatches = 2;
  c.global_batch_size = 8;
  c.max_lag_steps = 1;
  c.save_timeout_s = 600;
  c.optimizers = {kOptim0, kOptim1};
  c.writers = {kWriter0, kWriter1};
  c.optimizer_of_writer = {{kWriter0, kOptim0}, {kWriter1, kOptim1}};
  return c;
}

// six_steps() as one rank whose optimizer shard decides its own updates (one shard, one
// writer), a save allowed to lag one step.
StepDriverConfig one_shard_deciding() {
  auto c = six_steps();
  c.max_lag_steps = 1;
  c.shard_decides = true;
  c.optimizers = {kOptim0};
  c.writers = {kWriter0};
  c.optimizer_of_writer = {{kWriter0, kOptim0}};
  return c;
}

bool feeds_back(const StepAction& a) {
  return std::holds_alternative<OpenTrainStep>(a) || std::holds_alternative<BeginSave>(a) ||
         std::holds_alternative<CommitSave>(a);
}

// A driver and a clock. on() returns the actions as describe() words them, and checks
// the invariant the actor relies on: an action that may feed an event back comes last.
struct Drive {
  StepDriver driver;
  double now = 0;

  explicit Drive(StepDriverConfig c, StepDriverStart start = {}) : driver(std::move(c), start) {}

  Lines on(const StepEvent& e) {
    const auto actions = driver.on(e, now);
    Lines out;
    for (size_t i = 0; i < actions.size(); ++i) {
      if (feeds_back(actions[i])) CHECK_MESSAGE(i + 1 == actions.size(), describe(actions[i]));
      out.push_back(describe(actions[i]));
    }
    return out;
  }
  Phase phase() const { return driver.phase(); }

  // Shorthands for the events of one step.
  Lines decided(int64_t step, double at = 0) { return on(UpdateDecided{step, at}); }
  Lines closed(int64_t step) { return on(TrainStepClosed{step, step * 8}); }
  Lines copied(int64_t step, int32_t pp) { return on(msg::SnapshotTaken{step, {0, pp, 0}}); }
  Lines written(int32_t pp, uint64_t attempt, bool ok = true, std::string error = {}) {
    msg::ShardWritten w;
    w.rank.pp = pp;
    w.ok = ok;
    w.error = std::move(error);
    w.record = "shard" + std::to_string(pp);
    w.bytes = 100 + pp;
    w.attempt = attempt;
    return on(w);
  }
  // A training step from its open to its close, with nothing else happening.
  void plain_step(int64_t step) {
    decided(step);
    closed(step);
  }
};

const std::string kFirstRunStep = "OpenTrainStep 1 RunStep train 1 consumed 0 microbatches 2";

}  // namespace

TEST_CASE("step driver: the start opens step 1 and sends its RunStep; a driver waits for the wiring") {
  Drive d(six_steps());
  CHECK(d.phase() == Phase::Wiring);
  CHECK(d.on(Tick{}).empty());
  CHECK(d.on(GroupWired{}) == Lines{kFirstRunStep});
  CHECK(d.phase() == Phase::Training);
  CHECK(d.driver.issued_step() == 1);
}

TEST_CASE("step driver: running ahead — the next RunStep goes out with the update, dated by the decision") {
  Drive d(six_steps());
  d.on(GroupWired{});
  CHECK(d.decided(1, 1000.25) ==
        Lines{"SendUpdate 1", "SendRunStepAhead RunStep train 2 consumed 8 microbatches 2 done-may-wait issued_at 1000.25"});
  CHECK(d.phase() == Phase::RunningAhead);
  CHECK(d.driver.issued_step() == 2);
  // Step 2's reports arriving before step 1 closes wait for its ledger; step 1's do not.
  CHECK(d.driver.report_is_early(2));
  CHECK_FALSE(d.driver.report_is_early(1));
  // Step 1 closes: step 2 opens without a second RunStep.
  CHECK(d.closed(1) == Lines{"OpenTrainStep 2 (went out ahead)"});
  CHECK(d.phase() == Phase::Training);
  CHECK_FALSE(d.driver.report_is_early(2));
  // Every step to the last runs ahead; the last one has nothing to hand over.
  for (int64_t n = 2; n <= 5; ++n) {
    CAPTURE(n);
    CHECK(d.decided(n, 2000.0 + double(n)) ==
          Lines{fmt::format("SendUpdate {}", n),
                fmt::format("SendRunStepAhead RunStep train {} consumed {} microbatches 2 done-may-wait issued_at {}", n + 1,
                            n * 8, 2000 + n)});
    CHECK(d.closed(n) == Lines{fmt::format("OpenTrainStep {} (went out ahead)", n + 1)});
  }
  CHECK(d.decided(6) == Lines{"SendUpdate 6"});
  CHECK(d.phase() == Phase::Training);
  CHECK(d.closed(6) == Lines{"FinishRun completed"});
  CHECK(d.phase() == Phase::Finished);
  // Nothing follows the end.
  CHECK(d.on(GroupWired{}).empty());
  CHECK(d.on(Tick{}).empty());
}

TEST_CASE("step driver: a restarted group's first step is closed at once (its close ends the recovery)") {
  StepDriverStart start;
  start.step = 2;
  start.consumed_samples = 16;
  start.resumed = true;
  start.recovering = true;
  Drive d(six_steps(), start);
  CHECK(d.on(GroupWired{}) == Lines{"OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
  // No done-may-wait on the step after the first: step 3 must close at once.
  CHECK(d.decided(3, 5) == Lines{"SendUpdate 3", "SendRunStepAhead RunStep train 4 consumed 24 microbatches 2 issued_at 5"});
  d.closed(3);
  CHECK(d.decided(4, 6) ==
        Lines{"SendUpdate 4", "SendRunStepAhead RunStep train 5 consumed 32 microbatches 2 done-may-wait issued_at 6"});
}

TEST_CASE("step driver: a resumed run neither saves nor evaluates its checkpoint's step again") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.eval_microbatches = 3;
  c.eval_interval = 2;
  StepDriverStart start;
  start.step = 4;
  start.consumed_samples = 32;
  start.resumed = true;
  Drive d(c, start);
  CHECK(d.on(GroupWired{}) == Lines{"OpenTrainStep 5 RunStep train 5 consumed 32 microbatches 2"});
  CHECK(d.driver.last_saved_step() == 4);
}

TEST_CASE("step driver: evaluations every eval_interval steps and at the end; none runs ahead past one") {
  auto c = six_steps();
  c.eval_microbatches = 3;
  c.eval_interval = 4;
  Drive d(c);
  // A fresh run evaluates the initial weights first (step 0 is a multiple of the interval).
  CHECK(d.on(GroupWired{}) == Lines{"OpenEval RunStep eval 1 consumed 0 microbatches 3"});
  CHECK(d.phase() == Phase::Evaluating);
  CHECK(d.on(EvalClosed{}) == Lines{kFirstRunStep});
  for (int64_t n = 1; n <= 3; ++n) d.plain_step(n);
  // Step 4 is evaluated: step 5 does not go out with its update.
  CHECK(d.decided(4) == Lines{"SendUpdate 4"});
  CHECK(d.closed(4) == Lines{"OpenEval RunStep eval 2 consumed 0 microbatches 3"});
  CHECK(d.phase() == Phase::Evaluating);
  CHECK(d.driver.report_is_early(4));  // a training report now would not be for an open ledger
  CHECK(d.on(EvalClosed{}) == Lines{"OpenTrainStep 5 RunStep train 5 consumed 32 microbatches 2"});
  d.plain_step(5);
  // The last step is evaluated, then the run ends.
  CHECK(d.decided(6) == Lines{"SendUpdate 6"});
  CHECK(d.closed(6) == Lines{"OpenEval RunStep eval 3 consumed 0 microbatches 3"});
  CHECK(d.on(EvalClosed{}) == Lines{"FinishRun completed"});
}

TEST_CASE("step driver: a stop ends the run after the current step; a step already handed over runs first") {
  SUBCASE("asked before the update: nothing goes out ahead") {
    Drive d(six_steps());
    d.on(GroupWired{});
    d.plain_step(1);
    CHECK(d.on(StopRequested{SIGINT}).empty());  // acted on at the next decision
    CHECK(d.driver.stop_signal() == SIGINT);
    CHECK(d.decided(2) == Lines{"SendUpdate 2"});
    CHECK(d.closed(2) == Lines{"FinishRun interrupted: signal 2"});
  }
  SUBCASE("asked after step 2 went out ahead: step 2 runs, then the run ends") {
    Drive d(six_steps());
    d.on(GroupWired{});
    d.decided(1);
    d.on(StopRequested{SIGINT});
    CHECK(d.closed(1) == Lines{"OpenTrainStep 2 (went out ahead)"});
    CHECK(d.decided(2) == Lines{"SendUpdate 2"});
    CHECK(d.closed(2) == Lines{"FinishRun interrupted: signal 2"});
  }
  SUBCASE("SIGTERM with save_on_exit: a final checkpoint of the step, then the end") {
    auto c = six_steps();
    c.save_on_exit = true;
    Drive d(c);
    d.on(GroupWired{});
    d.decided(1);
    d.on(StopRequested{SIGTERM});
    d.closed(1);
    d.decided(2);
    CHECK(d.closed(2) == Lines{"BeginSave 2 final"});
    CHECK(d.phase() == Phase::FinalSave);
    CHECK(d.on(SaveOpened{7}).empty());
    CHECK(d.copied(2, 0).empty());
    CHECK(d.copied(2, 1).empty());  // a final save lets nothing else start
    CHECK(d.written(0, 7) == Lines{"KeepShard shard0 bytes 100"});
    CHECK(d.written(1, 7) == Lines{"KeepShard shard1 bytes 101", "CommitSave"});
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun interrupted: signal 15"});
    CHECK(d.driver.last_saved_step() == 2);
  }
  SUBCASE("SIGTERM right after the step was saved: no second save") {
    auto c = six_steps();
    c.save_on_exit = true;
    c.interval_steps = 1;
    c.max_lag_steps = 0;
    Drive d(c);
    d.on(GroupWired{});
    CHECK(d.decided(1) == Lines{"SendUpdate 1"});  // max_lag_steps 0: step 1's save holds step 2
    CHECK(d.closed(1) == Lines{"BeginSave 1"});
    d.on(SaveOpened{3});
    d.copied(1, 0);
    CHECK(d.copied(1, 1).empty());
    CHECK(d.phase() == Phase::WaitingForSave);  // held: step 2 may not trail the save
    d.on(StopRequested{SIGTERM});
    d.written(0, 3);
    CHECK(d.written(1, 3) == Lines{"KeepShard shard1 bytes 101", "CommitSave"});
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun interrupted: signal 15"});
  }
  SUBCASE("a stop while a save is being written waits for it") {
    Drive d([] {
      auto c = six_steps();
      c.interval_steps = 2;
      return c;
    }());
    d.on(GroupWired{});
    d.plain_step(1);
    d.decided(2);
    CHECK(d.closed(2) == Lines{"BeginSave 2"});
    d.on(SaveOpened{9});
    d.copied(2, 0);
    CHECK(d.copied(2, 1) == Lines{"OpenTrainStep 3 (went out ahead)"});
    d.on(StopRequested{SIGINT});
    CHECK(d.decided(3) == Lines{"SendUpdate 3"});
    CHECK(d.closed(3).empty());
    CHECK(d.phase() == Phase::Stopping);
    d.written(0, 9);
    d.written(1, 9);
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun interrupted: signal 2"});
  }
}

TEST_CASE("step driver: a regroup saves the step it is asked at, then ends the group's run with \"regroup\"") {
  SUBCASE("asked during step 2: nothing goes out ahead; step 2 is saved, then the end") {
    Drive d(six_steps());
    d.on(GroupWired{});
    d.plain_step(1);
    CHECK(d.on(RegroupRequested{}).empty());  // acted on at the step's close
    CHECK(d.decided(2) == Lines{"SendUpdate 2"});
    CHECK(d.closed(2) == Lines{"BeginSave 2"});
    d.on(SaveOpened{5});
    d.copied(2, 0);
    CHECK(d.copied(2, 1).empty());  // no step 3: the save ends first
    CHECK(d.phase() == Phase::WaitingForSave);
    d.written(0, 5);
    d.written(1, 5);
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun regroup: step 2 saved: the run continues on another placement"});
    CHECK(d.phase() == Phase::Finished);
  }
  SUBCASE("asked after step 2 went out ahead: step 2 runs first") {
    Drive d(six_steps());
    d.on(GroupWired{});
    d.decided(1);
    d.on(RegroupRequested{});
    CHECK(d.closed(1) == Lines{"OpenTrainStep 2 (went out ahead)"});
    CHECK(d.decided(2) == Lines{"SendUpdate 2"});
    CHECK(d.closed(2) == Lines{"BeginSave 2"});
  }
  SUBCASE("at a step whose interval save is in flight: that save is the regroup's") {
    auto c = six_steps();
    c.interval_steps = 2;
    c.max_lag_steps = 0;
    Drive d(c);
    d.on(GroupWired{});
    d.plain_step(1);
    d.decided(2);
    CHECK(d.closed(2) == Lines{"BeginSave 2"});
    CHECK(d.on(RegroupRequested{}).empty());
    d.on(SaveOpened{6});
    d.copied(2, 0);
    d.copied(2, 1);
    d.written(0, 6);
    d.written(1, 6);
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun regroup: step 2 saved: the run continues on another placement"});
  }
  SUBCASE("the regroup's save fails: the request is dropped and training goes on") {
    Drive d(six_steps());
    d.on(GroupWired{});
    d.plain_step(1);
    d.on(RegroupRequested{});
    d.decided(2);
    CHECK(d.closed(2) == Lines{"BeginSave 2"});
    d.on(SaveOpened{5});
    d.copied(2, 0);
    d.copied(2, 1);
    CHECK(d.written(1, 5, false, "disk full") ==
          Lines{"SaveFailed 2: " + kWriter1 + ": disk full", "RegroupDropped 2",
                "OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
    d.plain_step(3);
    CHECK(d.phase() == Phase::Training);  // step 4 open: no regroup any more
  }
  SUBCASE("asked in the last step: the run ends as it would") {
    Drive d(six_steps());
    d.on(GroupWired{});
    for (int64_t s = 1; s <= 5; ++s) d.plain_step(s);
    d.on(RegroupRequested{});
    d.decided(6);
    CHECK(d.closed(6) == Lines{"FinishRun completed"});
  }
}

TEST_CASE("step driver: a checkpoint lags training by max_lag_steps; the step past that waits for it") {
  auto c = six_steps();
  c.interval_steps = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  // Step 2 is to be saved: step 3 goes out ahead, but step 2 must close at once.
  CHECK(d.decided(2, 4) == Lines{"SendUpdate 2", "SendRunStepAhead RunStep train 3 consumed 16 microbatches 2 issued_at 4"});
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  CHECK(d.phase() == Phase::TakingCopies);
  CHECK(d.driver.save_in_flight());
  CHECK(d.on(SaveOpened{11}).empty());
  CHECK(d.copied(1, 0).empty());  // another step's copy
  CHECK(d.copied(2, 0).empty());
  // Every copy taken: training goes on while the writers write.
  CHECK(d.copied(2, 1) == Lines{"OpenTrainStep 3 (went out ahead)"});
  // Step 4 would trail step 2's save by 2 > max_lag_steps: it does not go out ahead...
  CHECK(d.decided(3) == Lines{"SendUpdate 3"});
  // ...and waits for the save at step 3's close.
  CHECK(d.closed(3).empty());
  CHECK(d.phase() == Phase::WaitingForSave);
  CHECK(d.written(0, 11) == Lines{"KeepShard shard0 bytes 100"});
  CHECK(d.written(1, 11) == Lines{"KeepShard shard1 bytes 101", "CommitSave"});
  CHECK(d.on(SaveCommitted{}) == Lines{"OpenTrainStep 4 RunStep train 4 consumed 24 microbatches 2"});
  CHECK(d.driver.last_saved_step() == 2);
}

TEST_CASE("step driver: a save committed while training goes on changes nothing else") {
  auto c = six_steps();
  c.interval_steps = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.closed(2);
  d.on(SaveOpened{5});
  d.copied(2, 0);
  d.copied(2, 1);
  d.written(0, 5);
  d.written(1, 5);
  CHECK(d.on(SaveCommitted{}).empty());
  CHECK(d.phase() == Phase::Training);
  // With the save done, step 4 runs ahead again.
  CHECK(d.decided(3) ==
        Lines{"SendUpdate 3", "SendRunStepAhead RunStep train 4 consumed 24 microbatches 2 done-may-wait issued_at 0"});
}

TEST_CASE("step driver: every interval step gets its save, waiting for the one in flight") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_lag_steps = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.on(SaveOpened{21});
  d.copied(2, 0);
  CHECK(d.copied(2, 1) == Lines{"OpenTrainStep 3 (went out ahead)"});
  // Lag 2: step 4 may still go out ahead of step 2's save...
  CHECK(d.decided(3).size() == 2);
  d.closed(3);
  // ...but step 5 may not.
  CHECK(d.decided(4) == Lines{"SendUpdate 4"});
  // Step 4 closes with step 2's save still being written: it waits, then saves.
  CHECK(d.closed(4).empty());
  CHECK(d.phase() == Phase::WaitingForSave);
  d.written(0, 21);
  d.written(1, 21);
  CHECK(d.on(SaveCommitted{}) == Lines{"BeginSave 4"});
}

TEST_CASE("step driver: with max_lag_steps 0 an interval save holds the next step") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_lag_steps = 0;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  CHECK(d.decided(2) == Lines{"SendUpdate 2"});
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.on(SaveOpened{1});
  d.copied(2, 0);
  CHECK(d.copied(2, 1).empty());
  CHECK(d.phase() == Phase::WaitingForSave);
  d.written(0, 1);
  d.written(1, 1);
  CHECK(d.on(SaveCommitted{}) == Lines{"OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
}

TEST_CASE("step driver: interval_seconds — a save due after the next step went out is deferred with max_lag_steps 0") {
  auto c = six_steps();
  c.interval_seconds = 10;
  c.max_lag_steps = 0;
  Drive d(c);  // the clock starts at 0
  d.on(GroupWired{});
  d.now = 5;
  CHECK(d.decided(1).size() == 2);  // not due yet: step 2 goes out ahead
  d.now = 12;
  CHECK(d.closed(1) == Lines{"SaveDeferred 1", "OpenTrainStep 2 (went out ahead)"});
  // Due at step 2's decision: step 3 waits, and step 2 is saved at its close.
  CHECK(d.decided(2) == Lines{"SendUpdate 2"});
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.now = 13;
  d.on(SaveOpened{4});  // the interval restarts when the save opens
  d.copied(2, 0);
  CHECK(d.copied(2, 1).empty());
  d.written(0, 4);
  d.written(1, 4);
  CHECK(d.on(SaveCommitted{}) == Lines{"OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
  d.now = 22;
  CHECK(d.decided(3).size() == 2);  // 9 s since the save opened
}

// One shard deciding its own update applies step n + 1's without an UpdateCommand, so
// nothing would order a save's copies of step n before it: the step after a step to be
// saved still goes out ahead, but its update is the coordinator's, whose UpdateCommand
// follows the SnapshotCommand (docs/runtime.md, "Checkpoints in a run").
TEST_CASE("step driver: when the shard decides its updates, the coordinator decides the one after a saved step") {
  auto c = one_shard_deciding();
  c.interval_steps = 2;
  Drive d(c);
  CHECK(d.on(GroupWired{}) == Lines{"OpenTrainStep 1 RunStep train 1 consumed 0 microbatches 2 shard-decides"});
  CHECK(d.decided(1) == Lines{"SendUpdate 1", "SendRunStepAhead RunStep train 2 consumed 8 microbatches 2 "
                                              "done-may-wait shard-decides issued_at 0"});
  CHECK(d.closed(1) == Lines{"OpenTrainStep 2 (went out ahead)"});
  // Step 2 is saved: step 3 goes out ahead without the shard deciding it.
  CHECK(d.decided(2) == Lines{"SendUpdate 2", "SendRunStepAhead RunStep train 3 consumed 16 microbatches 2 issued_at 0"});
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.on(SaveOpened{1});
  CHECK(d.copied(2, 0) == Lines{"OpenTrainStep 3 (went out ahead)"});
  CHECK(d.decided(3) == Lines{"SendUpdate 3"});  // step 4 would trail the save in flight too far
  d.written(0, 1);
  CHECK(d.on(SaveCommitted{}).empty());
  CHECK(d.closed(3) == Lines{"OpenTrainStep 4 RunStep train 4 consumed 24 microbatches 2 shard-decides"});
}

TEST_CASE("step driver: interval_seconds — when the shard decides its update, a save due after the next step went "
          "out is deferred") {
  auto c = one_shard_deciding();
  c.interval_seconds = 10;
  Drive d(c);
  d.on(GroupWired{});
  d.now = 5;
  CHECK(d.decided(1).size() == 2);  // not due yet: step 2 goes out ahead
  d.now = 12;
  const auto actions = d.driver.on(TrainStepClosed{1, 8}, d.now);
  REQUIRE(actions.size() == 2);
  const auto* deferred = std::get_if<SaveDeferred>(&actions[0]);
  REQUIRE(deferred != nullptr);
  CHECK(deferred->step == 1);
  CHECK(deferred->reason == "the optimizer shard decides its own update");
  // Due at step 2's decision: step 3 goes out ahead, decided by the coordinator, and
  // step 2 is saved at its close.
  CHECK(d.decided(2) == Lines{"SendUpdate 2", "SendRunStepAhead RunStep train 3 consumed 16 microbatches 2 issued_at 0"});
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
}

TEST_CASE("step driver: the end of a run waits for the save in flight, and saves the last step when asked") {
  SUBCASE("a lagging save is committed before the end") {
    auto c = six_steps();
    c.interval_steps = 5;
    c.max_lag_steps = 3;
    Drive d(c);
    d.on(GroupWired{});
    for (int64_t n = 1; n <= 4; ++n) d.plain_step(n);
    d.decided(5);
    CHECK(d.closed(5) == Lines{"BeginSave 5"});
    d.on(SaveOpened{2});
    d.copied(5, 0);
    CHECK(d.copied(5, 1) == Lines{"OpenTrainStep 6 (went out ahead)"});
    d.decided(6);
    CHECK(d.closed(6).empty());
    CHECK(d.phase() == Phase::Stopping);
    d.written(0, 2);
    d.written(1, 2);
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun completed"});
  }
  SUBCASE("save_on_exit: the last step's final save") {
    auto c = six_steps();
    c.save_on_exit = true;
    Drive d(c);
    d.on(GroupWired{});
    for (int64_t n = 1; n <= 5; ++n) d.plain_step(n);
    d.decided(6);
    CHECK(d.closed(6) == Lines{"BeginSave 6 final"});
    d.on(SaveOpened{8});
    d.copied(6, 0);
    d.copied(6, 1);
    d.written(0, 8);
    CHECK(d.written(1, 8).back() == "CommitSave");
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun completed"});
  }
  SUBCASE("interval_steps naming the last step saves it without save_on_exit") {
    auto c = six_steps();
    c.interval_steps = 3;
    Drive d(c);
    d.on(GroupWired{});
    for (int64_t n = 1; n <= 5; ++n) {
      d.decided(n);
      if (n == 3) {
        CHECK(d.closed(3) == Lines{"BeginSave 3"});
        d.on(SaveOpened{1});
        d.copied(3, 0);
        d.copied(3, 1);
        d.written(0, 1);
        d.written(1, 1);
        d.on(SaveCommitted{});
      } else {
        d.closed(n);
      }
    }
    d.decided(6);
    CHECK(d.closed(6) == Lines{"BeginSave 6 final"});
  }
}

TEST_CASE("step driver: a failed interval save is logged and training goes on; the next save retries") {
  auto c = six_steps();
  c.interval_steps = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.closed(2);
  d.on(SaveOpened{31});
  d.copied(2, 0);
  d.copied(2, 1);
  // writer 1 fails: the save fails; training (step 3, open) goes on as it was.
  CHECK(d.written(1, 31, false, "disk full") == Lines{"SaveFailed 2: " + kWriter1 + ": disk full"});
  CHECK(d.phase() == Phase::Training);
  CHECK_FALSE(d.driver.save_in_flight());
  // The other writer's late report belongs to a given-up save.
  CHECK(d.written(0, 31).empty());
  d.decided(3);
  d.closed(3);
  d.decided(4);
  // The writer that reported the failed write stays up: step 4's save goes to it.
  CHECK(d.closed(4) == Lines{"BeginSave 4"});
  CHECK(d.phase() == Phase::TakingCopies);
  d.on(SaveOpened{32});
  d.copied(4, 0);
  CHECK(d.copied(4, 1) == Lines{"OpenTrainStep 5 (went out ahead)"});
}

TEST_CASE("step driver: a writer that dies while writing fails its save; one not writing is only noted") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_lag_steps = 0;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.closed(2);
  d.on(SaveOpened{41});
  d.copied(2, 0);
  d.copied(2, 1);
  CHECK(d.phase() == Phase::WaitingForSave);
  d.written(0, 41);
  CHECK(d.on(WriterDown{kWriter0}).empty());  // its shard is written
  CHECK(d.on(WriterDown{kWriter1}) == Lines{"SaveFailed 2: " + kWriter1 + " died while writing",
                                             "OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
}

TEST_CASE("step driver: a save not committed within save_timeout_s fails, naming what it waits for") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.save_timeout_s = 30;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.now = 100;
  d.closed(2);  // the save starts at 100
  d.on(SaveOpened{51});
  d.copied(2, 1);
  d.now = 129.5;
  CHECK(d.on(Tick{}).empty());
  CHECK(d.phase() == Phase::TakingCopies);
  d.now = 130;
  // Writer 1 had its copy and did not write it: hung, replaced. Writer 0 never got its
  // copy (optim 0 has not copied): not hung.
  const std::string why = "not committed within checkpoint.save_timeout_s = 30 s; still waiting for " + kOptim0 +
                          ", " + kWriter0 + ", " + kWriter1;
  CHECK(d.on(Tick{}) == Lines{"ReplaceWriters " + kWriter1, "SaveFailed 2: " + why, "OpenTrainStep 3 (went out ahead)"});
  // A copy of the given-up save arriving late changes nothing.
  CHECK(d.copied(2, 0).empty());
  // The next save waits until the hung writer is replaced, so that its copy goes to the
  // successor; another writer's exit does not count.
  d.decided(3);
  d.closed(3);
  d.decided(4);
  CHECK(d.closed(4) == Lines{"SaveWaitsForWriters 4 writers 1"});
  CHECK(d.phase() == Phase::WaitingForWriters);
  CHECK(d.on(WriterDown{kWriter0}).empty());
  CHECK(d.on(WriterDown{kWriter1}) == Lines{"BeginSave 4"});
  CHECK(d.phase() == Phase::TakingCopies);
}

TEST_CASE("step driver: a save that cannot be opened or committed fails; training goes on") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_lag_steps = 0;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  CHECK(d.on(SaveNotOpened{"mkdir: Permission denied"}) ==
        Lines{"SaveFailed 2 not begun: mkdir: Permission denied",
              "OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
  d.decided(3);
  d.closed(3);
  d.decided(4);
  CHECK(d.closed(4) == Lines{"BeginSave 4"});
  d.on(SaveOpened{61});
  d.copied(4, 0);
  d.copied(4, 1);
  d.written(0, 61);
  CHECK(d.written(1, 61).back() == "CommitSave");
  CHECK(d.on(CommitFailed{"rename: No space left on device"}) ==
        Lines{"SaveFailed 4: rename: No space left on device",
              "OpenTrainStep 5 RunStep train 5 consumed 32 microbatches 2"});
  CHECK(d.driver.last_saved_step() == 0);
}

TEST_CASE("step driver: a final save is retried once; a second failure ends the run as failed") {
  auto c = six_steps();
  c.save_on_exit = true;
  c.save_timeout_s = 10;
  Drive d(c);
  d.on(GroupWired{});
  for (int64_t n = 1; n <= 5; ++n) d.plain_step(n);
  d.decided(6);
  SUBCASE("a writer fails: the retry goes to it at once, then times out") {
    CHECK(d.closed(6) == Lines{"BeginSave 6 final"});
    d.on(SaveOpened{71});
    d.copied(6, 0);
    d.copied(6, 1);
    d.now = 50;
    CHECK(d.written(0, 71, false, "injected") ==
          Lines{"SaveFailed 6 final: " + kWriter0 + ": injected", "RetryFinalSave 6 attempt 2 of 2",
                "BeginSave 6 final"});
    CHECK(d.phase() == Phase::FinalSave);
    d.on(SaveOpened{72});
    d.now = 60;
    CHECK(d.on(Tick{}) ==
          Lines{"SaveFailed 6 final: not committed within checkpoint.save_timeout_s = 10 s; still waiting for " + kOptim0 +
                    ", " + kOptim1 + ", " + kWriter0 + ", " + kWriter1,
                "FinishRunFinalSaveFailed 6 after 2: not committed within checkpoint.save_timeout_s = 10 s; still "
                "waiting for " +
                    kOptim0 + ", " + kOptim1 + ", " + kWriter0 + ", " + kWriter1});
    CHECK(d.phase() == Phase::Finished);
  }
  SUBCASE("it cannot be opened twice; after a stop the end names the stop") {
    d.on(StopRequested{SIGTERM});
    CHECK(d.closed(6) == Lines{"BeginSave 6 final"});
    CHECK(d.on(SaveNotOpened{"EIO"}) ==
          Lines{"SaveFailed 6 final not begun: EIO", "RetryFinalSave 6 attempt 2 of 2", "BeginSave 6 final"});
    CHECK(d.on(SaveNotOpened{"EIO"}) ==
          Lines{"SaveFailed 6 final not begun: EIO", "FinishRunFinalSaveFailed 6 after 2: EIO (stopped: signal 15)"});
  }
  SUBCASE("the retry commits: the run completes") {
    d.closed(6);
    d.on(SaveOpened{81});
    d.copied(6, 0);
    d.copied(6, 1);
    d.written(0, 81);
    d.written(1, 81);
    CHECK(d.on(CommitFailed{"fsync: EIO"}) ==
          Lines{"SaveFailed 6 final: fsync: EIO", "RetryFinalSave 6 attempt 2 of 2", "BeginSave 6 final"});
    d.on(SaveOpened{82});
    d.copied(6, 0);
    d.copied(6, 1);
    d.written(0, 82);
    d.written(1, 82);
    CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun completed"});
  }
}

TEST_CASE("step driver: the stop during an evaluation ends the run after it") {
  auto c = six_steps();
  c.eval_microbatches = 1;
  c.eval_interval = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.on(EvalClosed{});
  d.plain_step(1);
  d.decided(2);
  CHECK(d.closed(2) == Lines{"OpenEval RunStep eval 2 consumed 0 microbatches 1"});
  d.on(StopRequested{SIGINT});
  CHECK(d.on(EvalClosed{}) == Lines{"FinishRun interrupted: signal 2"});
}

TEST_CASE("step driver: shards all written before the last copy is reported commit at once, and training goes on") {
  // With the replicated optimizer and DP > 1 the replicas that write no shard may
  // report their copies after every shard is written: the last report commits, and the
  // commit resumes training (before, the run sat in TakingCopies with no step in flight
  // for the watchdog to find).
  auto c = six_steps();
  c.interval_steps = 2;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.closed(2);
  d.on(SaveOpened{91});
  d.copied(2, 0);
  d.written(0, 91);
  CHECK(d.written(1, 91) == Lines{"KeepShard shard1 bytes 101"});
  CHECK(d.copied(2, 1) == Lines{"CommitSave"});
  // Step 3 went out ahead with step 2's update: its ledger opens now.
  CHECK(d.on(SaveCommitted{}) == Lines{"OpenTrainStep 3 (went out ahead)"});
  CHECK(d.phase() == Phase::Training);
  CHECK_FALSE(d.driver.save_in_flight());
  CHECK(d.driver.last_saved_step() == 2);
  // The run goes on as any other.
  d.decided(3);
  CHECK(d.closed(3) == Lines{"OpenTrainStep 4 (went out ahead)"});
}

TEST_CASE("step driver: step_driver_config reads the config") {
  Config c;
  c.mutable_parallel()->set_data(2);
  c.mutable_checkpoint()->set_interval_steps(4);
  c.mutable_checkpoint()->set_max_lag_steps(2);
  c.mutable_training()->set_eval_interval(3);
  const auto d = step_driver_config(c);
  CHECK(d.total_steps == config::full_updates(c));
  CHECK(d.microbatches == config::microbatches_per_replica(c));
  CHECK(d.eval_microbatches == config::eval_microbatches_per_replica(c));
  CHECK(d.eval_interval == 3);
  CHECK(d.global_batch_size == c.batch().global_batch_size());
  CHECK(d.interval_steps == 4);
  CHECK(d.max_lag_steps == 2);
  CHECK(d.save_on_exit);
  CHECK(d.save_timeout_s == 600);
  // Every rank's shard copies; without the distributed optimizer only replica 0 writes.
  const auto ranks = Topology::logical(c).all_ranks();
  CHECK(d.optimizers.size() == ranks.size());
  size_t writers = 0;
  for (const auto& r : ranks) writers += c.parallel().distributed_optimizer() || r.dp == 0 ? 1 : 0;
  CHECK(d.writers.size() == writers);
  CHECK(d.writers.front() == writer_path(ranks.front()));
}

TEST_CASE("step driver: a hung writer is replaced at the deadline; the final save's retry waits for its successor") {
  auto c = six_steps();
  c.save_on_exit = true;
  c.save_timeout_s = 10;
  Drive d(c);
  d.on(GroupWired{});
  for (int64_t n = 1; n <= 5; ++n) d.plain_step(n);
  d.decided(6);
  CHECK(d.closed(6) == Lines{"BeginSave 6 final"});
  d.on(SaveOpened{101});
  d.copied(6, 0);
  d.copied(6, 1);
  d.written(1, 101);
  d.now = 10;
  const std::string why = "not committed within checkpoint.save_timeout_s = 10 s; still waiting for " + kWriter0;
  CHECK(d.on(Tick{}) == Lines{"ReplaceWriters " + kWriter0, "SaveFailed 6 final: " + why,
                              "RetryFinalSave 6 attempt 2 of 2", "SaveWaitsForWriters 6 writers 1"});
  // The abandoned writer's late report belongs to a given-up save.
  CHECK(d.written(0, 101, false, "late").empty());
  CHECK(d.on(WriterDown{kWriter0}) == Lines{"BeginSave 6 final"});
  d.on(SaveOpened{102});
  d.copied(6, 0);
  d.copied(6, 1);
  d.written(0, 102);
  CHECK(d.written(1, 102).back() == "CommitSave");
  CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun completed"});
}

TEST_CASE("step driver: max_failed_saves interval saves failed in a row stop the run as failed; a commit resets the count") {
  auto c = six_steps();
  c.total_steps = 10;
  c.interval_steps = 1;
  c.max_lag_steps = 0;
  c.max_failed_saves = 2;
  Drive d(c);
  d.on(GroupWired{});
  auto fail_at = [&](int64_t step) {
    d.decided(step);
    d.closed(step);
    return d.on(SaveNotOpened{"mkdir: No space left on device"});
  };
  CHECK(fail_at(1) == Lines{"SaveFailed 1 not begun: mkdir: No space left on device",
                            "OpenTrainStep 2 RunStep train 2 consumed 8 microbatches 2"});
  // Step 2's save commits: the count starts again.
  d.decided(2);
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.on(SaveOpened{121});
  d.copied(2, 0);
  d.copied(2, 1);
  d.written(0, 121);
  d.written(1, 121);
  CHECK(d.on(SaveCommitted{}) == Lines{"OpenTrainStep 3 RunStep train 3 consumed 16 microbatches 2"});
  CHECK(fail_at(3).back() == "OpenTrainStep 4 RunStep train 4 consumed 24 microbatches 2");
  // The second in a row: no step after it, no final save, the run ends as failed.
  CHECK(fail_at(4) == Lines{"SaveFailed 4 not begun: mkdir: No space left on device",
                            "FinishRunFailed: 2 checkpoint(s) in a row failed (checkpoint.max_failed_saves = 2), the "
                            "last: mkdir: No space left on device"});
  CHECK(d.phase() == Phase::Finished);
}

TEST_CASE("step driver: a failed save past max_failed_saves with a step run ahead ends the run after that step") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_failed_saves = 1;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  d.closed(2);
  d.on(SaveOpened{131});
  d.copied(2, 0);
  d.copied(2, 1);
  // Step 3 went out ahead; the write fails while it runs: it ends, nothing more goes out.
  CHECK(d.written(0, 131, false, "write: No space left on device") ==
        Lines{"SaveFailed 2: " + kWriter0 + ": write: No space left on device"});
  CHECK(d.decided(3) == Lines{"SendUpdate 3"});
  CHECK(d.closed(3) == Lines{"FinishRunFailed: 1 checkpoint(s) in a row failed (checkpoint.max_failed_saves = 1), "
                             "the last: " + kWriter0 + ": write: No space left on device"});
}

TEST_CASE("step driver: records that cannot be written stop the run at the next step boundary, after the save in flight") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.max_lag_steps = 0;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.decided(2);
  CHECK(d.closed(2) == Lines{"BeginSave 2"});
  d.on(SaveOpened{141});
  d.copied(2, 0);
  d.copied(2, 1);
  CHECK(d.phase() == Phase::WaitingForSave);
  // Said while the save is written: the run waits for it, then ends.
  CHECK(d.on(StorageFailed{"3 record(s) could not be written"}).empty());
  CHECK(d.phase() == Phase::Stopping);
  d.written(0, 141);
  d.written(1, 141);
  CHECK(d.on(SaveCommitted{}) == Lines{"FinishRunFailed: 3 record(s) could not be written"});
  CHECK(d.driver.last_saved_step() == 2);
}

TEST_CASE("step driver: SIGHUP stops as SIGTERM does, with a final save") {
  auto c = six_steps();
  c.save_on_exit = true;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  d.on(StopRequested{SIGHUP});
  d.decided(2);
  CHECK(d.closed(2) == Lines{"BeginSave 2 final"});
}

TEST_CASE("step driver: a final save whose shards are written before its last copy commits on that copy") {
  auto c = six_steps();
  c.save_on_exit = true;
  Drive d(c);
  d.on(GroupWired{});
  for (int64_t n = 1; n <= 5; ++n) d.plain_step(n);
  d.decided(6);
  d.closed(6);
  d.on(SaveOpened{111});
  d.copied(6, 0);
  d.written(0, 111);
  CHECK(d.written(1, 111) == Lines{"KeepShard shard1 bytes 101"});
  CHECK(d.copied(6, 1) == Lines{"CommitSave"});
  CHECK(d.on(SaveCommitted{}) == Lines{"FinishRun completed"});
  // A signal after the end changes nothing.
  CHECK(d.on(StopRequested{SIGTERM}).empty());
  CHECK(d.on(GroupWired{}).empty());
}

// logging.on_spike: the guard's decisions (engine/spike_guard.h).
TEST_CASE("spike guard: RECORD never drops; SKIP_UPDATE drops a spike's update once judged") {
  Config c;
  c.mutable_logging()->set_spike_window(8);
  c.mutable_logging()->set_spike_min_history(4);
  // A falling loss with a little noise, gradient norms around 1.
  auto loss_at = [](int s) { return 4.0 - 0.01 * s + ((s % 3) - 1) * 0.002; };
  auto norm_at = [](int s) { return 1.0 + ((s % 2) ? 0.05 : -0.05); };

  SpikeGuard record(c);
  CHECK(!record.active());
  for (int s = 1; s <= 10; ++s) CHECK(!record.drop_update(s, loss_at(s), norm_at(s)));
  CHECK(!record.drop_update(11, 9.0, 50.0));  // recorded elsewhere, never dropped

  c.mutable_logging()->set_on_spike(LoggingConfig::SKIP_UPDATE);
  SpikeGuard guard(c);
  CHECK(guard.active());
  // Before min_history values are in nothing is judged, however high.
  CHECK(!guard.drop_update(1, loss_at(1), norm_at(1)));
  CHECK(!guard.drop_update(2, 20.0, 1.0));
  for (int s = 3; s <= 10; ++s) CHECK(!guard.drop_update(s, loss_at(s), norm_at(s)));
  // The loss 30 % above its median (and far outside its MAD) is dropped; so is a grad
  // norm more than 4x its median with an ordinary loss; ordinary steps pass.
  CHECK(guard.drop_update(11, loss_at(11) * 1.35, norm_at(11)));
  CHECK(!guard.drop_update(12, loss_at(12), norm_at(12)));
  CHECK(guard.drop_update(13, loss_at(13), 4.5));
  CHECK(!guard.drop_update(14, loss_at(14), norm_at(14)));
  // A step just under the floor passes: +25 % of the median loss.
  CHECK(!guard.drop_update(15, loss_at(15) * 1.25, norm_at(15)));

  // A restarted coordinator warmed from the timeline's step lines judges its first step.
  std::vector<metrics::Json> lines;
  for (int s = 1; s <= 10; ++s) {
    metrics::StepRecord r;
    r.step = s;
    r.loss = loss_at(s);
    r.grad_norm = norm_at(s);
    lines.push_back(metrics::to_json(r));
  }
  // A line of step 12, after the resume point (an abandoned timeline's), is left out.
  metrics::StepRecord again;
  again.step = 12;
  again.loss = 99.0;
  again.grad_norm = 99.0;
  lines.push_back(metrics::to_json(again));
  SpikeGuard resumed(c);
  resumed.warm(lines, 10);
  CHECK(resumed.history() == 8);  // the window's newest 8 of steps 1..10
  CHECK(resumed.drop_update(11, loss_at(11) * 1.35, norm_at(11)));
  SpikeGuard cold(c);
  CHECK(!cold.drop_update(11, loss_at(11) * 1.35, norm_at(11)));  // nothing to judge against
}

TEST_CASE("step driver: a spike that rolls back sends its update alone, and its close ends the group's run") {
  auto c = six_steps();
  c.interval_steps = 2;
  c.eval_microbatches = 1;
  c.eval_interval = 3;
  c.save_on_exit = true;
  Drive d(c);
  d.on(GroupWired{});
  d.plain_step(1);
  // Step 2 is a spike with ROLLBACK: its update (dropped by the coordinator) goes out,
  // step 3 does not go out ahead.
  CHECK(d.on(UpdateDecided{2, 5, /*rolls_back=*/true}) == Lines{"SendUpdate 2"});
  CHECK(d.phase() == Phase::Training);
  CHECK_FALSE(d.driver.report_is_early(3));
  // Its close takes no checkpoint (interval 2 names it), no evaluation and no final
  // save: the group's run ends as "rollback".
  CHECK(d.closed(2) == Lines{"FinishRun rollback: step 2 is a spike (logging.on_spike ROLLBACK)"});
  CHECK(d.phase() == Phase::Finished);
  CHECK(d.on(Tick{}).empty());

  // A save in flight (of step 4, lagging) is waited for first.
  Drive e(c);
  e.on(GroupWired{});
  e.plain_step(1);
  CHECK(e.decided(2, 4) == Lines{"SendUpdate 2", "SendRunStepAhead RunStep train 3 consumed 16 microbatches 2 issued_at 4"});
  CHECK(e.closed(2) == Lines{"BeginSave 2"});
  CHECK(e.on(SaveOpened{7}).empty());
  CHECK(e.copied(2, 0).empty());
  CHECK(e.copied(2, 1) == Lines{"OpenTrainStep 3 (went out ahead)"});
  CHECK(e.on(UpdateDecided{3, 6, /*rolls_back=*/true}) == Lines{"SendUpdate 3"});
  CHECK(e.closed(3).empty());
  CHECK(e.phase() == Phase::Stopping);
  CHECK(e.written(0, 7) == Lines{"KeepShard shard0 bytes 100"});
  CHECK(e.written(1, 7) == Lines{"KeepShard shard1 bytes 101", "CommitSave"});
  CHECK(e.on(SaveCommitted{}) == Lines{"FinishRun rollback: step 3 is a spike (logging.on_spike ROLLBACK)"});
  CHECK(e.driver.last_saved_step() == 2);
}

TEST_CASE("layer labels of the per-layer gradient norms") {
  CHECK(layer_label("h.12.attn.c_attn.weight") == "h.12");
  CHECK(layer_label("h.0.ln_1.bias") == "h.0");
  CHECK(layer_label("model.layers.3.self_attn.q_proj.weight") == "layers.3");
  CHECK(layer_label("wte.weight") == "wte");
  CHECK(layer_label("ln_f.bias") == "ln_f");
  CHECK(layer_label("model.norm.weight") == "model.norm");
  CHECK(layer_label("lm_head.weight") == "lm_head");
  CHECK(layer_label("h.x.weight") == "h.x");  // no layer number: the tensor's own name
}
