#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "metrics/error.h"
#include "metrics/files.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"
#include "test/support/scratch_dir.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;

namespace {

StepRecord make_step(int64_t i) {
  StepRecord r;
  r.step = i;
  r.consumed_samples = 8 * i;
  r.loss = 5.5 - 0.1 * double(i);
  r.lr = 1e-3 * double(i) / 10;
  r.grad_norm = 0.75 + double(i);
  r.clipped = i % 2 == 0;
  r.input_tokens = 512;
  r.loss_tokens = 480 + i;
  r.padding_tokens = 16;
  r.step_time_s = 0.125;
  r.restarts = i / 3;
  r.wall_time = 1.7e9 + double(i);
  return r;
}

void append_raw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::app | std::ios::binary);
  f << bytes;
}

}  // namespace

TEST_CASE("step record JSON: fields, derived throughput, non-finite values") {
  StepRecord r = make_step(3);
  const auto j = to_json(r);
  CHECK(j["type"] == "step");
  CHECK(j["step"] == 3);
  CHECK(j["consumed_samples"] == 24);
  CHECK(j["loss"].get<double>() == doctest::Approx(5.2));
  CHECK(j["clipped"] == false);
  CHECK(j["restarts"] == 1);
  // (512 - 16) / 0.125
  CHECK(j["tokens_per_s"].get<double>() == 3968.0);
  // Fields keep their documented order on the line.
  CHECK(j.dump().substr(0, 66) == "{\"type\":\"step\",\"time\":1700000003.0,\"step\":3,\"consumed_samples\":24,");

  r.loss = NAN;
  r.grad_norm = INFINITY;
  r.skipped = true;
  const auto k = to_json(r);
  CHECK(k["loss"] == "nan");
  CHECK(k["grad_norm"] == "inf");
  CHECK(k["skipped"] == true);
  // Dumped text is strict JSON (no bare NaN).
  CHECK(k.dump().find("NaN") == std::string::npos);

  const StepRecord back = step_from_json(Json::parse(k.dump()));
  CHECK(std::isnan(back.loss));
  CHECK(std::isinf(back.grad_norm));
  CHECK(back.step == 3);
  CHECK(back.lr == r.lr);  // doubles round-trip exactly through the dump
  CHECK(back.wall_time == r.wall_time);
  CHECK(back.padding_tokens == 16);
  CHECK(back.skipped);

  Json bad = to_json(make_step(1));
  bad.erase("loss_tokens");
  CHECK_THROWS_WITH_AS(step_from_json(bad), "step record: missing field \"loss_tokens\"", MetricsError);
  bad = to_json(make_step(1));
  bad["step"] = "one";
  CHECK_THROWS_WITH_AS(step_from_json(bad), "step record: field \"step\": expected an integer, got \"one\"",
                       MetricsError);
  bad = to_json(make_step(1));
  bad["loss"] = "lots";
  CHECK_THROWS_WITH_AS(step_from_json(bad),
                       "field \"loss\": expected a number or \"nan\"/\"inf\"/\"-inf\", got \"lots\"", MetricsError);
}

TEST_CASE("step record JSON: each stage's memory peak, written and read back; a peak that is not its parts refused") {
  StepRecord r = make_step(2);
  CHECK_FALSE(to_json(r).contains("memory"));  // no stages reported: no field (older files have none)
  r.stage_memory = {{"stage/dp0/pp0/tp0", 400, 400, 800, 3000, 123, 3000},
                    {"stage/dp0/pp1/tp0", 380, 380, 760, 2500, 456, 2500}};
  const auto j = to_json(r);
  REQUIRE(j["memory"].size() == 2);
  CHECK(j["memory"][0]["stage"] == "stage/dp0/pp0/tp0");
  CHECK(j["memory"][0]["peak"] == 400 + 400 + 800 + 3000 + 123);
  CHECK(j["memory"][1]["scratch"] == 456);
  const StepRecord back = step_from_json(Json::parse(j.dump()));
  REQUIRE(back.stage_memory.size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    CHECK(back.stage_memory[k].stage == r.stage_memory[k].stage);
    CHECK(back.stage_memory[k].peak() == r.stage_memory[k].peak());
    CHECK(back.stage_memory[k].optimizer_state == r.stage_memory[k].optimizer_state);
    CHECK(back.stage_memory[k].planned_activations == r.stage_memory[k].planned_activations);
  }
  Json bad = j;
  bad["memory"][1]["peak"] = 1;
  CHECK_THROWS_WITH_AS(step_from_json(bad),
                       "step record: memory of stage/dp0/pp1/tp0: \"peak\" is not the sum of its five parts",
                       MetricsError);
  bad = j;
  bad["memory"][0].erase("activations");
  CHECK_THROWS_WITH_AS(step_from_json(bad), "step record: memory of stage/dp0/pp0/tp0: missing field \"activations\"",
                       MetricsError);
}

TEST_CASE("step record JSON: a blend's datasets, written and read back; only with a blend") {
  StepRecord r = make_step(2);
  CHECK_FALSE(to_json(r).contains("datasets"));
  r.datasets = {{"data/web", 3, 90, 30, 900}, {"data/code", 5, 150, 50, 1500}};
  const auto j = to_json(r);
  REQUIRE(j["datasets"].size() == 2);
  CHECK(j["datasets"][1]["prefix"] == "data/code");
  CHECK(j["datasets"][1]["consumed_tokens"] == 1500);
  const StepRecord back = step_from_json(Json::parse(j.dump()));
  REQUIRE(back.datasets.size() == 2);
  CHECK(back.datasets[0].prefix == "data/web");
  CHECK(back.datasets[0].samples == 3);
  CHECK(back.datasets[0].tokens == 90);
  CHECK(back.datasets[1].consumed_samples == 50);
  Json bad = j;
  bad["datasets"][0].erase("tokens");
  CHECK_THROWS_WITH_AS(step_from_json(bad), "step record: missing field \"tokens\"", MetricsError);
}

TEST_CASE("metrics.jsonl: one object per line, every kind of event, read back in order") {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    JsonlLog log(path);
    StartupRecord s;
    s.config_path = "configs/default.textproto";
    s.run_dir = dir.path();
    s.parameters = 123456;
    s.data_parallel = 2;
    s.pipeline_parallel = 2;
    s.actor_paths = {"stage/dp0/pp0/tp0", "stage/dp1/pp0/tp0"};
    log.startup(s);
    for (int i = 1; i <= 3; ++i) log.step(make_step(i));
    EvalRecord e;
    e.step = 3;
    e.loss = 4.25;
    e.samples = 16;
    log.eval(e);
    FailureRecord f;
    f.step = 4;
    f.actor = "stage/dp1/pp0/tp0";
    f.phase = "backward";
    f.reason = "injected fault: KILL\nsecond line \xff";  // newline and invalid UTF-8 must not break the line
    f.action = "restart";
    f.restarts = 1;
    f.resume_step = 2;
    log.failure(f);
    RunSummary sum;
    sum.status = "completed";
    sum.steps = 3;
    log.summary(sum);
  }
  const auto contents = read_jsonl(path);
  CHECK_FALSE(contents.unterminated_tail);
  REQUIRE(contents.objects.size() == 7);
  const char* types[] = {"startup", "step", "step", "step", "eval", "failure", "summary"};
  for (size_t i = 0; i < 7; ++i) CHECK(contents.objects[i]["type"] == types[i]);
  CHECK(contents.objects[0]["actor_paths"][1] == "stage/dp1/pp0/tp0");
  CHECK(contents.objects[0]["resumed_from_step"].is_null());
  CHECK(contents.objects[0]["data_parallel"] == 2);
  CHECK(step_from_json(contents.objects[2]).step == 2);
  CHECK(contents.objects[4]["loss"] == 4.25);
  CHECK(contents.objects[5]["resume_step"] == 2);
  CHECK(contents.objects[5]["reason"].get<std::string>().substr(0, 26) == "injected fault: KILL\nsecon");
  CHECK(contents.objects[6]["status"] == "completed");
  // Exactly 7 newline characters: no line was split.
  const std::string text = read_file(path);
  CHECK(std::count(text.begin(), text.end(), '\n') == 7);
}

TEST_CASE("metrics.jsonl: a crash mid-line loses only that line; reopening repairs and continues") {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    JsonlLog log(path);
    log.step(make_step(1));
    log.step(make_step(2));
  }
  // What a crash inside write() could leave: the start of a third line.
  append_raw(path, "{\"type\":\"step\",\"step\":3,\"consumed_sa");
  auto torn = read_jsonl(path);
  CHECK(torn.unterminated_tail);
  CHECK(torn.objects.size() == 2);

  JsonlLog resumed(path);
  CHECK(resumed.repaired_bytes() == 36);
  resumed.step(make_step(3));
  const auto fixed = read_jsonl(path);
  CHECK_FALSE(fixed.unterminated_tail);
  REQUIRE(fixed.objects.size() == 3);
  CHECK(step_from_json(fixed.objects[2]).step == 3);
  CHECK(step_from_json(fixed.objects[2]).loss == make_step(3).loss);
}

TEST_CASE("metrics.jsonl: a file that is only a torn line is emptied on reopen") {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  append_raw(path, "{\"type\":");
  JsonlLog log(path);
  CHECK(log.repaired_bytes() == 8);
  log.step(make_step(1));
  CHECK(read_jsonl(path).objects.size() == 1);
}

TEST_CASE("read_jsonl names the file and line of a bad line") {
  ScratchDir dir;
  const std::string path = dir / "bad.jsonl";
  append_raw(path, "{\"type\":\"step\"}\n\n[1,2]\n");
  CHECK_THROWS_WITH_AS(read_jsonl(path), (path + ":3: expected a JSON object, got [1,2]").c_str(), MetricsError);
  append_raw(dir / "bad2.jsonl", "{\"type\":\"step\"}\n{oops}\n");
  CHECK_THROWS_WITH_AS(read_jsonl(dir / "bad2.jsonl"), (dir / "bad2.jsonl" + ":2: not valid JSON: {oops}").c_str(),
                       MetricsError);
  CHECK_THROWS_AS(read_jsonl(dir / "missing.jsonl"), MetricsError);
  JsonlLog log(dir / "x.jsonl");
  CHECK_THROWS_AS(log.write(Json::array()), MetricsError);
  CHECK_THROWS_AS(log.write({{"no_type", 1}}), MetricsError);
}

TEST_CASE("write_file_atomic replaces the whole file and leaves no temporary behind") {
  ScratchDir dir;
  const std::string path = dir / "config.textproto";
  write_file_atomic(path, "model { layers: 2 }\n");
  CHECK(read_file(path) == "model { layers: 2 }\n");
  write_file_atomic(path, "x");
  CHECK(read_file(path) == "x");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  CHECK_THROWS_WITH_AS(write_file_atomic(dir / "no/such/dir/f", "x"),
                       doctest::Contains("no/such/dir/f.tmp."), MetricsError);
}
