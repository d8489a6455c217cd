// What a run leaves behind, around starts, restarts, hangs and failed saves: the
// startup record in every run, TensorBoard's restart marker on every restart and
// resume (each step once for its readers), no metrics record lost to a metrics actor
// that dies or hangs, a hung coordinator replaced, every interval step checkpointed,
// a final save that fails retried and then reported as a failed run, and a start from
// a checkpoint that does not load refused with its diagnosis.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/commit.h"
#include "ckpt/corrupt.h"
#include "ckpt/error.h"
#include "ckpt/reader.h"
#include "engine/checkpointing.h"
#include "messages/tensorboard.pb.h"
#include "metrics/json.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"
#include "metrics/tfrecord.h"
#include "test/actors/recovery_harness.h"

using namespace troupe;
using namespace troupe::testing::recovery;
namespace fs = std::filesystem;

namespace {

std::vector<metrics::Json> lines_of(const Config& c) {
  return metrics::read_jsonl(metrics::run_dir_layout(c.logging().run_dir()).metrics).objects;
}

std::vector<metrics::Json> lines_of_type(const Config& c, const std::string& type) {
  std::vector<metrics::Json> out;
  for (auto& j : lines_of(c))
    if (j.at("type") == type) out.push_back(j);
  return out;
}

std::vector<int64_t> steps_of(const std::vector<metrics::Json>& lines) {
  std::vector<int64_t> out;
  for (const auto& j : lines) out.push_back(j.at("step").get<int64_t>());
  return out;
}

// A TensorBoard event file read the way TensorBoard's EventAccumulator reads it: the
// files of the run's events/ in name order; a SessionLog START at step s drops every
// point read so far whose step is >= s (its restart purge). Returns the "loss" points
// left (step -> value, in step order) and the START steps seen.
struct Tensorboard {
  std::map<int64_t, float> loss;
  std::vector<int64_t> starts;
  int64_t raw_loss_points = 0;  // before any purge
};

Tensorboard read_events(const Config& c) {
  Tensorboard tb;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(metrics::run_dir_layout(c.logging().run_dir()).events))
    files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<std::pair<int64_t, float>> points;
  for (const auto& f : files)
    for (const auto& record : metrics::read_tfrecord_file(f).records) {
      tensorboard::Event e;
      REQUIRE(e.ParseFromString(record));
      if (e.has_session_log() && e.session_log().status() == tensorboard::SessionLog::START) {
        tb.starts.push_back(e.step());
        std::erase_if(points, [&](const auto& p) { return p.first >= e.step(); });
      }
      for (const auto& v : e.summary().value())
        if (v.tag() == "loss") {
          points.emplace_back(e.step(), v.simple_value());
          ++tb.raw_loss_points;
        }
    }
  for (const auto& [step, value] : points) {
    CHECK_MESSAGE(!tb.loss.count(step), "step " << step << " twice after the purge");
    tb.loss[step] = value;
  }
  return tb;
}

// The final timeline's losses, each step once, as TensorBoard would plot them.
void check_each_step_once(const Tensorboard& tb, const actors::RunResult& r, int64_t first_step = 1) {
  REQUIRE(tb.loss.size() == r.outcome.steps.size());
  int64_t step = first_step;
  for (const auto& s : r.outcome.steps) {
    CAPTURE(s.step);
    CHECK(s.step == step++);
    REQUIRE(tb.loss.count(s.step));
    CHECK(tb.loss.at(s.step) == float(s.loss));
  }
}

std::string step_dir(const Config& c, int64_t step) {
  return engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(step);
}

}  // namespace

TEST_CASE("every run's metrics.jsonl starts with its startup record; every line starts with type and time") {
  Config c = base("records-startup", 4);
  c.mutable_logging()->set_tensorboard(true);
  const auto a = run(c);
  REQUIRE_MESSAGE(a.outcome.status == "completed", a.outcome.error);
  auto lines = lines_of(c);
  REQUIRE(!lines.empty());
  CHECK(lines.front().at("type") == "startup");
  CHECK(lines.front().at("resumed_from_step").is_null());
  for (const auto& j : lines) {
    CAPTURE(j.dump());
    REQUIRE(j.size() >= 2);
    CHECK(j.begin().key() == "type");
    CHECK(std::next(j.begin()).key() == "time");
    CHECK(j.at("time").get<double>() > 1.7e9);
  }
  CHECK(steps_of(lines_of_type(c, "checkpoint")) == std::vector<int64_t>{2, 4});

  // A second process resumes from step 4 and trains to 6: its startup record says so,
  // and its event file opens with the restart marker, so steps 5 and 6 show once.
  Config more = c;
  more.mutable_training()->set_train_samples(48);
  more.mutable_checkpoint()->set_load("latest");
  const auto b = run(more);
  REQUIRE_MESSAGE(b.outcome.status == "completed", b.outcome.error);
  const auto startups = lines_of_type(c, "startup");
  REQUIRE(startups.size() == 2);
  CHECK(startups[1].at("resumed_from_step") == 4);
  const auto tb = read_events(c);
  CHECK(tb.starts == std::vector<int64_t>{5});
  CHECK(tb.loss.size() == 6);
  for (const auto& s : b.outcome.steps) CHECK(tb.loss.at(s.step) == float(s.loss));
}

TEST_CASE("an in-run restart writes TensorBoard's restart marker: each step shows once") {
  // The coordinator dies committing step 4's checkpoint, after steps 3 and 4 were on
  // record: the group restarts from step 2 and redoes both.
  Config c = base("records-tb-restart");
  c.mutable_logging()->set_tensorboard(true);
  *c.mutable_faults()->add_fault() = fault("coordinator", 4, Fault::CHECKPOINT_WRITE);
  const auto r = run(c);
  check_identical_to_clean(r);
  const auto tb = read_events(c);
  CHECK(tb.starts == std::vector<int64_t>{3});
  CHECK(tb.raw_loss_points == 8);  // 1-4, then 3-6 again
  check_each_step_once(tb, r);
}

TEST_CASE("a hung metrics actor is found by its heartbeat and replaced; no record is lost") {
  for (const auto phase : {Fault::OPTIMIZER, Fault::CHECKPOINT_WRITE}) {
    const std::string name = engine::phase_name(phase);
    CAPTURE(name);
    Config c = base("records-metrics-hang-" + name);
    c.mutable_supervision()->set_heartbeat_interval_s(0.1);
    c.mutable_supervision()->set_hang_timeout_s(2);
    c.mutable_training()->set_eval_interval(3);
    c.mutable_training()->set_eval_samples(8);
    *c.mutable_faults()->add_fault() = fault("metrics", 4, phase, Fault::HANG);
    const auto r = run(c);
    REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
    CHECK(r.restarts == 0);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].actor == "metrics");
    CHECK(r.failures[0].reason.find("hung") != std::string::npos);
    // Every record once, in order: those posted while it hung and after, and the one it
    // hung on.
    CHECK(lines_of(c).front().at("type") == "startup");
    CHECK(steps_of(lines_of_type(c, "step")) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    CHECK(steps_of(lines_of_type(c, "eval")) == std::vector<int64_t>{0, 3, 6});  // 0: before the first step
    CHECK(steps_of(lines_of_type(c, "checkpoint")) == std::vector<int64_t>{2, 4, 6});
    CHECK(lines_of_type(c, "summary").size() == 1);
    const auto steps = lines_of_type(c, "step");
    for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i].at("loss").get<double>() == r.outcome.steps[i].loss);
  }
}

TEST_CASE("a hung coordinator is found by its heartbeat; the group restarts and the run recovers bitwise") {
  Config c = base("records-coordinator-hang");
  c.mutable_supervision()->set_heartbeat_interval_s(0.1);
  c.mutable_supervision()->set_hang_timeout_s(2);
  *c.mutable_faults()->add_fault() = fault("coordinator", 4, Fault::FORWARD, Fault::HANG);
  const auto r = run(c);
  check_identical_to_clean(r);
  CHECK(r.restarts == 1);
  REQUIRE(!r.failures.empty());
  CHECK(r.failures[0].actor == "coordinator");
  CHECK(r.failures[0].reason.find("hung") != std::string::npos);
}

TEST_CASE("a checkpoint every step is a checkpoint at every step, however far the writers trail") {
  // The default lag (1): a save still being written when the next one falls due is
  // waited for, never skipped.
  Config c = base("records-every-step");
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(1);
  c.mutable_checkpoint()->set_save_on_exit(false);
  const auto r = run(c);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  CHECK(ckpt::list_step_dirs(engine::checkpoint_root(c)) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(steps_of(lines_of_type(c, "checkpoint")) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(lines_of_type(c, "checkpoint_deferred").empty());
}

TEST_CASE("a final checkpoint that fails is tried again; failing twice, the run fails naming the newest checkpoint") {
  SUBCASE("one failed write: the retry commits it and the run completes") {
    Config c = base("records-final-retry");
    *c.mutable_faults()->add_fault() = fault("writer/dp0/pp1/tp0", 6, Fault::CHECKPOINT_WRITE, Fault::FAIL_WRITE);
    const auto r = run(c);
    REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
    CHECK(r.exit_code() == 0);
    const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
    REQUIRE(latest.checkpoint);
    CHECK(latest.checkpoint->step() == 6);
    const auto failed = lines_of_type(c, "checkpoint_failed");
    REQUIRE(failed.size() == 1);
    CHECK(failed[0].at("step") == 6);
    CHECK(failed[0].at("final") == true);
    const auto summary = lines_of_type(c, "summary");
    REQUIRE(summary.size() == 1);
    CHECK(summary[0].at("newest_checkpoint") == step_dir(c, 6));
  }
  SUBCASE("a writer killed while writing: the retry goes to its successor and the run completes") {
    Config c = base("records-final-kill");
    *c.mutable_faults()->add_fault() = fault("writer/dp1/pp1/tp0", 6, Fault::CHECKPOINT_WRITE, Fault::KILL);
    const auto r = run(c);
    REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
    const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
    REQUIRE(latest.checkpoint);
    CHECK(latest.checkpoint->step() == 6);
    CHECK(steps_of(lines_of_type(c, "checkpoint_failed")) == std::vector<int64_t>{6});
  }
  SUBCASE("two failed writes: the run fails, and says step 4's checkpoint is the newest") {
    Config c = base("records-final-fails");
    for (int i = 0; i < 2; ++i)
      *c.mutable_faults()->add_fault() = fault("writer/dp0/pp1/tp0", 6, Fault::CHECKPOINT_WRITE, Fault::FAIL_WRITE);
    const auto r = run(c);
    CHECK(r.outcome.status == "failed");
    CHECK(r.exit_code() == 1);
    CHECK(r.outcome.error.find("the final checkpoint of step 6 failed 2 times") != std::string::npos);
    CHECK(r.outcome.error.find("the newest complete checkpoint is " + step_dir(c, 4)) != std::string::npos);
    CHECK(lines_of_type(c, "checkpoint_failed").size() == 2);
    const auto summary = lines_of_type(c, "summary");
    REQUIRE(summary.size() == 1);
    CHECK(summary[0].at("status") == "failed");
    CHECK(summary[0].at("newest_checkpoint") == step_dir(c, 4));
  }
  SUBCASE("a writer that hangs: the attempt times out, the writer is replaced, and the retry commits") {
    Config c = base("records-final-hang");
    // Room for the successor (a writer runs at nice 19) to write its shard on a busy machine.
    c.mutable_checkpoint()->set_save_timeout_s(10);
    *c.mutable_faults()->add_fault() = fault("writer/dp1/pp0/tp0", 6, Fault::CHECKPOINT_WRITE, Fault::HANG);
    const auto r = run(c);
    REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
    CHECK(r.exit_code() == 0);
    const auto failed = lines_of_type(c, "checkpoint_failed");
    REQUIRE(failed.size() == 1);
    CHECK(failed[0].at("error").get<std::string>().find("checkpoint.save_timeout_s") != std::string::npos);
    // The hung writer is the one failure: abandoned and replaced, not the run's end.
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].actor == "writer/dp1/pp0/tp0");
    CHECK(r.failures[0].reason.find("hung: not committed within checkpoint.save_timeout_s") != std::string::npos);
    const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
    REQUIRE(latest.checkpoint);
    CHECK(latest.checkpoint->step() == 6);
  }
}

TEST_CASE("a start from a checkpoint that does not load is refused with its diagnosis, before any actor runs") {
  Config c = base("records-bad-start", 4);
  REQUIRE(run(c).outcome.status == "completed");
  SUBCASE("a damaged checkpoint named in checkpoint.load") {
    const auto damaged = ckpt::corrupt_shard(step_dir(c, 4), 1);
    Config again = c;
    again.mutable_checkpoint()->set_load(step_dir(c, 4));
    CHECK_THROWS_WITH_AS(run(again), doctest::Contains("damaged checkpoint"), ckpt::CheckpointError);
    CHECK_THROWS_WITH_AS(run(again), doctest::Contains(damaged.c_str()), ckpt::CheckpointError);
  }
  SUBCASE("a path that does not exist") {
    Config again = c;
    again.mutable_checkpoint()->set_load("/nonexistent/ckpt");
    CHECK_THROWS_WITH_AS(run(again), doctest::Contains("/nonexistent/ckpt"), ckpt::CheckpointError);
  }
  SUBCASE("latest, with every checkpoint damaged: no fresh start over them") {
    for (int64_t step : {2, 4}) ckpt::truncate_shard(step_dir(c, step), 0);
    Config again = c;
    again.mutable_checkpoint()->set_load("latest");
    CHECK_THROWS_WITH_AS(run(again), doctest::Contains("no checkpoint loads"), ckpt::CheckpointError);
    // Nothing was pruned or written over.
    CHECK(ckpt::list_step_dirs(engine::checkpoint_root(c)) == std::vector<int64_t>{2, 4});
  }
}
