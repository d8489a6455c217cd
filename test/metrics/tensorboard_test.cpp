#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "metrics/json.h"

#include "messages/tensorboard.pb.h"
#include "metrics/files.h"
#include "metrics/tensorboard_writer.h"
#include "metrics/tfrecord.h"
#include "test/support/scratch_dir.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;
namespace tb = troupe::tensorboard;

namespace {

StepRecord make_step(int64_t i, double loss_offset = 0) {
  StepRecord r;
  r.step = i;
  r.consumed_samples = 8 * i;
  r.loss = 6.0 - 0.25 * double(i) + loss_offset;
  r.lr = 1e-4 * double(i);
  r.grad_norm = 2.0 / double(i);
  r.clipped = r.grad_norm > 1.0;
  r.skipped = false;
  r.input_tokens = 512;
  r.loss_tokens = 500 - i;
  r.padding_tokens = i;
  r.step_time_s = 0.5;
  r.restarts = 0;
  r.wall_time = 1700000000.0 + double(i);
  return r;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `command`, returning its exit status and stdout.
int run(const std::string& command, std::string& out) {
  std::FILE* p = ::popen(command.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("event file name follows TensorFlow's pattern") {
  CHECK(event_file_name(1700000000, "node7") == "events.out.tfevents.1700000000.node7");
  CHECK(event_file_name(42, "h") == "events.out.tfevents.0000000042.h");
  CHECK_FALSE(host_name().empty());
}

TEST_CASE("event file: version header, one summary per step, all scalars, CRCs check") {
  ScratchDir dir;
  {
    EventFileWriter w(dir.path(), 1700000000.25);
    for (int i = 1; i <= 3; ++i) w.step(make_step(i));
    EvalRecord e;
    e.step = 3;
    e.loss = 4.5;
    e.wall_time = 1700000003.5;
    w.eval(e);
    w.sync();
  }
  const auto files = event_files(dir.path());
  REQUIRE(files.size() == 1);
  CHECK(std::filesystem::path(files[0]).filename().string() == "events.out.tfevents.1700000000." + host_name());

  const auto contents = read_tfrecord_file(files[0]);
  CHECK_FALSE(contents.truncated_tail);
  REQUIRE(contents.records.size() == 5);

  tb::Event first;
  REQUIRE(first.ParseFromString(contents.records[0]));
  CHECK(first.file_version() == "brain.Event:2");
  CHECK(first.wall_time() == 1700000000.25);
  CHECK(first.step() == 0);

  for (int i = 1; i <= 3; ++i) {
    tb::Event e;
    REQUIRE(e.ParseFromString(contents.records[size_t(i)]));
    CHECK(e.step() == i);
    CHECK(e.wall_time() == 1700000000.0 + i);
    REQUIRE(e.has_summary());
    const StepRecord r = make_step(i);
    const auto& v = e.summary().value();
    REQUIRE(v.size() == 10);
    for (int k = 0; k < 10; ++k) CHECK(v[k].tag() == kStepScalarTags[k]);
    CHECK(v[0].simple_value() == float(r.loss));
    CHECK(v[1].simple_value() == float(r.lr));
    CHECK(v[2].simple_value() == float(r.grad_norm));
    CHECK(v[3].simple_value() == (i == 1 ? 1.0f : 0.0f));  // clipped when 2/i > 1
    CHECK(v[4].simple_value() == 0.0f);
    CHECK(v[5].simple_value() == float((512.0 - i) / 0.5));
    CHECK(v[6].simple_value() == float(500 - i));
    CHECK(v[7].simple_value() == float(i));
    CHECK(v[8].simple_value() == 0.5f);
    CHECK(v[9].simple_value() == 0.0f);
  }
  tb::Event eval;
  REQUIRE(eval.ParseFromString(contents.records[4]));
  REQUIRE(eval.summary().value().size() == 1);
  CHECK(eval.summary().value(0).tag() == "eval/loss");
  CHECK(eval.summary().value(0).simple_value() == 4.5f);
}

TEST_CASE("a blend's datasets: their running counts with each step, their losses with each evaluation") {
  ScratchDir dir;
  {
    EventFileWriter w(dir.path(), 1700000000.25);
    StepRecord r = make_step(1);
    r.datasets = {{"/data/web_text_document", 3, 90, 30, 900}, {"code", 5, 150, 50, 1500}};
    w.step(r);
    EvalRecord e;
    e.step = 1;
    e.loss = 4.5;
    e.wall_time = 1700000003.5;
    e.datasets = {{"/data/web_text_document", 4.25, 4, 100}, {"code", 4.75, 4, 110}};
    w.eval(e);
    w.sync();
  }
  const auto contents = read_tfrecord_file(event_files(dir.path()).at(0));
  REQUIRE(contents.records.size() == 3);
  tb::Event step, eval;
  REQUIRE(step.ParseFromString(contents.records[1]));
  const auto& v = step.summary().value();
  REQUIRE(v.size() == 14);
  CHECK(v[10].tag() == "datasets/0_web_text_document/consumed_samples");
  CHECK(v[10].simple_value() == 30.0f);
  CHECK(v[11].tag() == "datasets/0_web_text_document/consumed_tokens");
  CHECK(v[11].simple_value() == 900.0f);
  CHECK(v[12].tag() == "datasets/1_code/consumed_samples");
  CHECK(v[13].simple_value() == 1500.0f);
  REQUIRE(eval.ParseFromString(contents.records[2]));
  REQUIRE(eval.summary().value().size() == 3);
  CHECK(eval.summary().value(1).tag() == "eval/datasets/0_web_text_document/loss");
  CHECK(eval.summary().value(1).simple_value() == 4.25f);
  CHECK(eval.summary().value(2).tag() == "eval/datasets/1_code/loss");
}

TEST_CASE("two writers in the same second get distinct, ordered file names") {
  ScratchDir dir;
  EventFileWriter a(dir.path(), 1700000000.0);
  EventFileWriter b(dir.path(), 1700000000.9);
  const auto files = event_files(dir.path());
  REQUIRE(files.size() == 2);
  CHECK(files[0] == a.path());
  CHECK(files[1] == b.path());
  CHECK(b.path() == a.path() + ".1");
  CHECK_THROWS_AS(EventFileWriter(dir / "missing", 1.0), std::runtime_error);
}

TEST_CASE("TensorBoard's own reader parses the event files (skips without the tensorboard package)") {
  ScratchDir dir;
  {
    // A run that restarts from the checkpoint of step 3 after reaching step 5: the
    // second process writes a new file, a session START at 4, then steps 4..6 anew.
    EventFileWriter w(dir.path(), 1700000000.0);
    for (int i = 1; i <= 5; ++i) w.step(make_step(i));
    EvalRecord e;
    e.step = 2;
    e.loss = 4.75;
    e.wall_time = 1700000002.5;
    w.eval(e);
  }
  {
    EventFileWriter w(dir.path(), 1700000010.0);
    w.session_start(4, 1700000010.0);
    for (int i = 4; i <= 6; ++i) {
      StepRecord r = make_step(i, /*loss_offset=*/0.125);
      r.restarts = 1;
      r.wall_time += 10;
      if (i == 6) {
        r.skipped = true;
        r.grad_norm = INFINITY;
      }
      w.step(r);
    }
  }

  const char* python = std::getenv("TROUPE_PYTHON");
  const std::string command = std::string(python ? python : "python3") + " " TROUPE_SOURCE_DIR
                              "/tools/metrics_read_tensorboard.py " + dir.path() + " 2>" + (dir / "stderr.txt");
  std::string out;
  const int rc = run(command, out);
  if (rc == 77 || rc == 127) {
    const std::string why = rc == 77 ? "the tensorboard Python package is not importable"
                                     : "python3 is not on PATH (set TROUPE_PYTHON to choose one)";
    MESSAGE("SKIPPED: TensorBoard reader check: " << why);
    std::fprintf(stderr, "test_metrics: SKIPPED the TensorBoard reader check: %s\n", why.c_str());
    return;
  }
  const std::string reader_stderr = read_file(dir / "stderr.txt");
  INFO("reader stderr: " << reader_stderr);
  REQUIRE(rc == 0);
  const auto j = Json::parse(out);
  CHECK(j["file_version"] == 2.0);
  const auto& s = j["scalars"];
  for (const char* tag : kStepScalarTags) CHECK(s.contains(tag));
  CHECK(s.contains("eval/loss"));

  // Steps 1..3 from the first process, 4..6 from the second: the START purged the
  // orphaned 4 and 5 of the first.
  const auto& loss = s["loss"];
  REQUIRE(loss.size() == 6);
  for (int i = 1; i <= 6; ++i) {
    const auto& point = loss[size_t(i - 1)];
    CHECK(point[0] == i);
    const double expect = make_step(i, i >= 4 ? 0.125 : 0.0).loss;
    CHECK(point[1].get<double>() == double(float(expect)));
  }
  const auto& restarts = s["restarts"];
  REQUIRE(restarts.size() == 6);
  CHECK(restarts[2][1] == 0.0);
  CHECK(restarts[3][1] == 1.0);
  CHECK(s["skipped"][5][1] == 1.0);
  CHECK(s["grad_norm"][5][1] == "inf");
  CHECK(s["tokens_per_s"][0][1].get<double>() == double(float(511.0 / 0.5)));
  CHECK(s["padding"][4][1] == 5.0);
  CHECK(s["loss_tokens"][4][1] == 495.0);
  CHECK(s["lr"][1][1].get<double>() == double(float(2e-4)));
  CHECK(s["step_time_s"][0][1] == 0.5);
  CHECK(s["clipped"][0][1] == 1.0);
  CHECK(s["clipped"][1][1] == 0.0);
  REQUIRE(s["eval/loss"].size() == 1);
  CHECK(s["eval/loss"][0][0] == 2);
  CHECK(s["eval/loss"][0][1] == 4.75);
  CHECK(loss[3][2] == 1700000014.0);  // wall time of the recomputed step 4
}
