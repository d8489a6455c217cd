// The acceptance ladder and the scaling sweep (acceptance/): the ladder on the default
// config passes, the broken-normalization switch makes it fail, the report files parse
// with one entry per rung, and the scaling table's arithmetic reproduces the seed's
// 512 -> 1,024 GPU step (180,000 -> 320,000 tokens/s: 1.78x, 89%).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "acceptance/dataset.h"
#include "acceptance/ladder.h"
#include "acceptance/measure.h"
#include "acceptance/scaling.h"
#include "acceptance/small_config.h"
#include "config/derived.h"
#include "config/text_format.h"
#include "sched/planner.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
using namespace troupe::acceptance;
namespace fs = std::filesystem;

namespace {

Config default_config() { return config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/default.textproto"); }

fs::path fresh_dir(const std::string& name) { return testing::fresh_temp_dir("acceptance-" + name); }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Section* find_section(const Report& r, int rung, const std::string& prefix) {
  for (const auto& g : r.rungs)
    if (g.number == rung)
      for (const auto& s : g.sections)
        if (s.name.rfind(prefix, 0) == 0) return &s;
  return nullptr;
}

// Prints a failing section's checks, so a FAIL in CI says which number broke.
std::string explain(const Report& r) {
  std::string out;
  for (const auto& g : r.rungs)
    for (const auto& s : g.sections)
      if (s.status == Status::kFail) {
        out += "FAIL " + s.name + "\n";
        for (const auto& c : s.checks)
          if (!c.pass) out += "  " + c.what + ": " + format_check(c) + "\n";
        for (const auto& n : s.notes) out += "  - " + n + "\n";
      }
  return out;
}

// The ladder on `c`, quiet, into a fresh directory named after `dir_name`.
Report run_quiet(const Config& c, const std::string& dir_name, const std::string& source) {
  AcceptanceOptions o;
  o.out_dir = fresh_dir(dir_name).string();
  o.config_source = source;
  o.console = nullptr;
  return run_acceptance(c, o);
}

// The ladder on the default config, run once for the cases that read it.
struct DefaultRun {
  fs::path dir = fresh_dir("default");
  Report report;
  DefaultRun() {
    AcceptanceOptions o;
    o.out_dir = dir.string();
    o.config_source = "configs/default.textproto";
    o.console = nullptr;
    report = run_acceptance(default_config(), o);
  }
};
const DefaultRun& default_run() {
  static const DefaultRun r;
  return r;
}

}  // namespace

TEST_CASE("the small model keeps the layout and shrinks the model") {
  const Config big = default_config();
  const auto small = derive_small_model(big, "/tmp/x", 64);
  const auto& c = small.config;
  CHECK(c.parallel().data() == 2);
  CHECK(c.parallel().pipeline() == 2);
  CHECK(c.parallel().schedule() == big.parallel().schedule());
  CHECK(c.model().layers() == 4);  // 2 per stage
  CHECK(c.model().heads() == 2);
  CHECK(c.model().width() == 32);
  CHECK(c.batch().seq_length() == 32);
  CHECK(c.batch().micro_batch_size() == 2);
  CHECK(config::microbatches_per_replica(c) == config::microbatches_per_replica(big));  // 4, under the cap
  CHECK(c.batch().global_batch_size() == 16);
  CHECK(c.optimizer().lr() == 1e-3);
  CHECK(c.data().pad_to_boundary());
  CHECK(small.derivation.find("model.width: 32 (config: 128") != std::string::npos);

  // The seed's 500B layout: 5,120 stage ranks is refused with the reason and the fix.
  const Config seed = config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/seed-500b.textproto");
  try {
    derive_small_model(seed, "/tmp/x", 64);
    FAIL("expected a refusal");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("5120 stage ranks") != std::string::npos);
    CHECK(what.find("--max-ranks 64") != std::string::npos);
  }
  Config one = seed;
  one.mutable_parallel()->set_data(1);
  const auto s1 = derive_small_model(one, "/tmp/x", 64);
  CHECK(s1.config.model().layers() == 16);  // 2 x PP 8
  CHECK(s1.config.model().heads() == 8);    // TP 8
  CHECK(s1.config.model().width() == 128);
  CHECK(config::microbatches_per_replica(s1.config) == 16);  // min(1,920, max(2 x 8, 4))

  // A Llama whose heads are not width / heads (model.head_dim) keeps them so: 4 heads of
  // 64 over 128 (wider than 32) give heads of 24 over the small width 64, of 16 give 8.
  Config llama = config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/llama-tiny.textproto");
  CHECK_FALSE(derive_small_model(llama, "/tmp/x", 64).config.model().has_head_dim());
  llama.mutable_model()->set_head_dim(64);
  const auto wide = derive_small_model(llama, "/tmp/x", 64);
  CHECK(wide.config.model().head_dim() == 24);
  CHECK(wide.derivation.find("head size 24, model.head_dim as the config's 64 is wider than width / heads") !=
        std::string::npos);
  llama.mutable_model()->set_head_dim(16);
  CHECK(derive_small_model(llama, "/tmp/x", 64).config.model().head_dim() == 8);
}

TEST_CASE("the capacity rung's measured step counts every chunk's slots and the deferred weight gradients") {
  // Interleaved 1F1B (2 chunks a stage) and ZB-H1 (split backward): each rank's stage
  // device peak is its weights, gradients, every slot of every chunk and the scratch,
  // within the 64-byte rounding of each block, and its saved activations are the
  // planner's figure to the byte (sched/activation_memory.h).
  for (const auto schedule : {ParallelConfig::INTERLEAVED_1F1B, ParallelConfig::ZB_H1}) {
    CAPTURE(ParallelConfig::Schedule_Name(schedule));
    Config c = default_config();
    c.mutable_parallel()->set_schedule(schedule);
    c.mutable_parallel()->set_virtual_stages(schedule == ParallelConfig::INTERLEAVED_1F1B ? 2 : 1);
    const auto ranks = measure_step_memory(c);
    REQUIRE(ranks.size() == 4);
    for (const auto& r : ranks) {
      CAPTURE(r.rank.pp);
      CHECK(r.stage_split.activations == r.planned_activations);
      const int64_t slack = r.stage_peak - (8 * r.params + r.activations());
      CHECK(slack >= 0);
      CHECK(slack <= 64 * r.stage_allocations);
      CHECK(r.all_slot_bytes > 0);
      CHECK(r.all_slot_bytes <= int64_t(r.slots) * r.slot_bytes);  // the largest slot is the last chunk's
    }
  }
}

TEST_CASE("the acceptance dataset packs into long, two-document and padded windows") {
  const auto docs = acceptance_documents(32, 8, 1234);
  REQUIRE(docs.size() == 32);
  for (size_t i = 0; i < docs.size(); ++i) {
    CAPTURE(i);
    CHECK(docs[i].back() == kEod);
    for (size_t k = 0; k + 1 < docs[i].size(); ++k) CHECK(docs[i][k] < 256);
    const size_t len = docs[i].size();
    switch (i % 4) {
      case 0: CHECK((len >= 90 && len <= 94)); break;  // 3T - [2, 6]
      case 1:
      case 2: CHECK((len >= 12 && len <= 16)); break;  // two fit in T + 1 = 33, three do not
      case 3: CHECK((len >= 17 && len <= 24)); break;
    }
  }
  CHECK(acceptance_documents(32, 8, 1234) == docs);  // a pure function of the seed
  CHECK(acceptance_documents(32, 8, 99) != docs);
}

TEST_CASE("acceptance on the default config passes, rung by rung") {
  const auto& run = default_run();
  const Report& r = run.report;
  INFO(explain(r));
  CHECK(r.passed());
  CHECK(exit_status(r) == 0);
  REQUIRE(r.rungs.size() == 4);
  for (const auto& g : r.rungs) CHECK(g.status() == Status::kPass);
  const char* passing[][2] = {{"1", "boundary masks"}, {"1", "loss normalization"}, {"1", "DP parity"},
                              {"1", "PP parity"},      {"1", "combined"},           {"2", "small model"},
                              {"2", "the config's own model"}, {"3", "kill a stage"}, {"3", "stop and resume"},
                              {"4", "small model"},    {"4", "the config's own model"}};
  for (const auto& [rung, name] : passing) {
    CAPTURE(name);
    const Section* s = find_section(r, std::atoi(rung), name);
    REQUIRE(s != nullptr);
    CHECK(s->status == Status::kPass);
    CHECK(s->checks.size() >= 1);
  }
  // The default layout has TP 1: the TP section is not applicable, not a PASS.
  const Section* tp = find_section(r, 1, "TP parity");
  REQUIRE(tp != nullptr);
  CHECK(tp->status == Status::kNotApplicable);
  // The combined layout is the config's DP 2 x PP 2.
  CHECK(find_section(r, 1, "combined (DP 2 x PP 2")->status == Status::kPass);
}

TEST_CASE("acceptance on a TP 2 (sequence parallel) x PP 2 x DP 2 layout runs and passes the TP sections") {
  Config c = default_config();
  c.mutable_parallel()->set_tensor(2);
  c.mutable_parallel()->set_sequence_parallel(true);
  const Report r = run_quiet(c, "tp2", "configs/default.textproto with TP 2 + SP");
  INFO(explain(r));
  CHECK(r.passed());
  const Section* tp = find_section(r, 1, "TP parity (TP 2)");
  REQUIRE(tp != nullptr);
  CHECK(tp->status == Status::kPass);
  const Section* all = find_section(r, 1, "combined (DP 2 x PP 2 x TP 2)");
  REQUIRE(all != nullptr);
  CHECK(all->status == Status::kPass);
  // Capacity counts the tensor-parallel replicas as copies held twice.
  const Section* cap = find_section(r, 2, "small model");
  REQUIRE(cap != nullptr);
  CHECK(cap->status == Status::kPass);
}

TEST_CASE("every rung passes on the shipped Llama config, and with TP 2 (sequence parallel) on top") {
  // configs/llama-tiny.textproto: grouped-query attention (4 heads, 2 kv), rotary
  // positions, SwiGLU, untied head, DP 2 x PP 2. With TP 2 the small model keeps
  // its kv heads split (2 of 4 heads over 2 ranks).
  for (const int tp : {1, 2}) {
    CAPTURE(tp);
    Config c = config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/llama-tiny.textproto");
    c.mutable_parallel()->set_tensor(tp);
    c.mutable_parallel()->set_sequence_parallel(tp > 1);
    const Report r = run_quiet(c, "llama-tp" + std::to_string(tp), "configs/llama-tiny.textproto");
    INFO(explain(r));
    CHECK(r.passed());
    for (const char* name : {"boundary masks", "loss normalization", "DP parity", "PP parity", "combined"}) {
      CAPTURE(name);
      const Section* s = find_section(r, 1, name);
      REQUIRE(s != nullptr);
      CHECK(s->status == Status::kPass);
    }
    const Section* tp_section = find_section(r, 1, "TP parity");
    REQUIRE(tp_section != nullptr);
    CHECK(tp_section->status == (tp > 1 ? Status::kPass : Status::kNotApplicable));
    CHECK(find_section(r, 2, "small model")->status == Status::kPass);
    CHECK(find_section(r, 3, "kill a stage")->status == Status::kPass);
  }
}

TEST_CASE("every rung passes under the interleaved (2 and 3 chunks) and zero-bubble schedules") {
  // The small model keeps the schedule: its layers are a multiple of the chunks a
  // stage; the PP 1 sections (DP parity) run the plain 1F1B, which one stage needs.
  struct Case {
    ParallelConfig::Schedule schedule;
    int chunks;
  };
  for (const Case k : {Case{ParallelConfig::INTERLEAVED_1F1B, 2}, Case{ParallelConfig::INTERLEAVED_1F1B, 3},
                       Case{ParallelConfig::ZB_H1, 1}}) {
    CAPTURE(ParallelConfig::Schedule_Name(k.schedule));
    CAPTURE(k.chunks);
    Config c = default_config();
    c.mutable_model()->set_layers(4 * k.chunks);
    c.mutable_parallel()->set_schedule(k.schedule);
    c.mutable_parallel()->set_virtual_stages(k.chunks);
    const Report r = run_quiet(c, "schedule-" + std::to_string(int(k.schedule)) + "-" + std::to_string(k.chunks),
                               "configs/default.textproto with another schedule");
    INFO(explain(r));
    CHECK(r.passed());
    const Section* pp = find_section(r, 1, "PP parity (PP 2)");
    REQUIRE(pp != nullptr);
    CHECK(pp->status == Status::kPass);
    const std::string schedule_note = fmt::format("{} schedule", ParallelConfig::Schedule_Name(k.schedule));
    CHECK(std::any_of(pp->notes.begin(), pp->notes.end(),
                      [&](const std::string& n) { return n.find(schedule_note) != std::string::npos; }));
    const Section* dp = find_section(r, 1, "DP parity (DP 2)");
    REQUIRE(dp != nullptr);
    CHECK(dp->status == Status::kPass);
    CHECK(find_section(r, 2, "small model")->status == Status::kPass);
    CHECK(find_section(r, 3, "kill a stage")->status == Status::kPass);
  }
}

TEST_CASE("the report files exist and parse, one entry per rung") {
  const auto& run = default_run();
  const auto md = read(run.dir / "report.md");
  const auto text = read(run.dir / "report.json");
  REQUIRE(!md.empty());
  REQUIRE(!text.empty());
  const auto j = nlohmann::json::parse(text);
  CHECK(j.at("passed") == true);
  CHECK(j.at("broken_loss_normalization") == false);
  CHECK(j.at("tolerances").size() >= 8);
  REQUIRE(j.at("rungs").size() == 4);
  const char* names[] = {"small-model correctness", "capacity", "save / recover", "calendar"};
  for (int i = 0; i < 4; ++i) {
    const auto& rung = j.at("rungs")[size_t(i)];
    CHECK(rung.at("rung") == i + 1);
    CHECK(rung.at("name") == names[i]);
    CHECK(rung.at("status") == "PASS");
    CHECK(rung.at("sections").size() >= 2);
    for (const auto& s : rung.at("sections"))
      for (const auto& c : s.at("checks")) {
        CHECK(c.at("pass").is_boolean());
        CHECK(c.contains("value"));
        CHECK(c.contains("limit"));
      }
  }
  for (const char* heading : {"## Rung 1: small-model correctness", "## Rung 2: capacity", "## Rung 3: save / recover",
                              "## Rung 4: calendar", "## Tolerances"})
    CHECK(md.find(heading) != std::string::npos);
  // The config's own calendar was measured and reported in days.
  const auto& cal = j.at("rungs")[3].at("sections")[1].at("notes");
  bool days = false;
  for (const auto& n : cal) days |= n.get<std::string>().find("calendar days at 90% efficiency") != std::string::npos;
  CHECK(days);
}

TEST_CASE("with the broken-normalization switch the accumulation rung fails and the exit status is 1") {
  const auto dir = fresh_dir("broken");
  AcceptanceOptions o;
  o.out_dir = dir.string();
  o.console = nullptr;
  o.break_loss_normalization = true;
  const Report r = run_acceptance(default_config(), o);
  CHECK_FALSE(r.passed());
  CHECK(exit_status(r) == 1);
  const Section* s = find_section(r, 1, "loss normalization");
  REQUIRE(s != nullptr);
  CHECK(s->status == Status::kFail);
  // It is the loss and the gradients that break, not the setup of the check.
  int failed = 0;
  for (const auto& c : s->checks) {
    if (c.what.rfind("smallest / largest", 0) == 0) CHECK(c.pass);
    failed += !c.pass;
  }
  CHECK(failed == 2);
  // Nothing else is affected by the switch.
  for (const auto& g : r.rungs)
    for (const auto& sec : g.sections)
      if (sec.name != "loss normalization") CHECK(sec.status != Status::kFail);
  const auto j = nlohmann::json::parse(read(dir / "report.json"));
  CHECK(j.at("passed") == false);
  CHECK(j.at("broken_loss_normalization") == true);
  CHECK(j.at("rungs")[0].at("status") == "FAIL");
}

TEST_CASE("scaling table arithmetic: the seed's 512 -> 1,024 GPUs") {
  std::vector<ScalingRow> rows(4);
  rows[0] = {512, 8, 240, 180000.0, {}, {}};
  rows[1] = {1024, 16, 120, 320000.0, {}, {}};
  rows[2] = {2560, 40, 48, std::nullopt, {}, {}};
  rows[3] = {5120, 80, 24, std::nullopt, {}, {}};
  compute_steps(rows);
  CHECK_FALSE(rows[0].step);
  REQUIRE(rows[1].step);
  CHECK(rows[1].step->speedup == doctest::Approx(32.0 / 18.0));
  CHECK(rows[1].step->efficiency == doctest::Approx(16.0 / 18.0));
  CHECK_FALSE(rows[2].step);
  const auto table = format_scaling_table(rows, "GPUs");
  CHECK(table.find("1.78x") != std::string::npos);
  CHECK(table.find("89%") != std::string::npos);
  CHECK(table.find("320,000") != std::string::npos);
  CHECK(table.find("not measured") != std::string::npos);
}

TEST_CASE("scaling table arithmetic: each step against the previous measured row") {
  std::vector<ScalingRow> rows(4);
  rows[0] = {1, 1, 8, 100.0, {}, {}};
  rows[1] = {2, 2, 4, 150.0, {}, {}};
  rows[2] = {4, 4, 2, std::nullopt, {}, {}};
  rows[3] = {8, 8, 1, 240.0, {}, {}};
  compute_steps(rows);
  REQUIRE(rows[1].step);
  CHECK(rows[1].step->speedup == doctest::Approx(1.5));
  CHECK(rows[1].step->efficiency == doctest::Approx(0.75));
  REQUIRE(rows[3].step);  // against DP 2, the last measured row
  CHECK(rows[3].step->speedup == doctest::Approx(1.6));
  CHECK(rows[3].step->efficiency == doctest::Approx(0.4));
  const auto table = format_scaling_table(rows, "ranks");
  CHECK(table.find("1.50x") != std::string::npos);
  CHECK(table.find("75%") != std::string::npos);
  CHECK(table.find("1.60x") != std::string::npos);
  CHECK(table.find("40%") != std::string::npos);
}

TEST_CASE("--dp lists: ascending positive integers, errors name the flag") {
  CHECK(parse_dp_list("1,2,4") == std::vector<int>{1, 2, 4});
  CHECK(parse_dp_list("8") == std::vector<int>{8});
  for (const char* bad : {"", "1,,2", "1,x", "0,1", "2,1", "1,1", "1.5"}) {
    CAPTURE(bad);
    try {
      parse_dp_list(bad);
      FAIL("expected an error");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).rfind("--dp ", 0) == 0);
    }
  }
}

TEST_CASE("the throughput window: steps after the warm-up, recomputed steps left out") {
  std::vector<metrics::StepRecord> steps;
  for (int k = 1; k <= 5; ++k) {
    metrics::StepRecord s;
    s.step = k;
    s.input_tokens = 100;
    s.padding_tokens = 10 * k;
    s.step_time_s = 0.5 * k;
    steps.push_back(s);
  }
  steps.push_back(steps[3]);
  steps.back().recomputed = true;  // a repeat of step 4: not counted twice
  const auto w = window_throughput(steps, 2);
  CHECK(w.first_step == 3);
  CHECK(w.last_step == 5);
  CHECK(w.updates == 3);
  CHECK(w.real_tokens == 70 + 60 + 50);
  CHECK(w.padding_tokens == 30 + 40 + 50);
  CHECK(w.step_seconds == doctest::Approx(1.5 + 2.0 + 2.5));
  CHECK(w.median_step_s == doctest::Approx(2.0));
  CHECK(w.tokens_per_s == doctest::Approx(180.0 / 6.0));
}

TEST_CASE("a scaling sweep of the default config at DP 1 and 2 measures both and writes the planner's format") {
  const auto dir = fresh_dir("scaling");
  ScalingOptions o;
  o.data_parallel = {1, 2};
  o.warmup = 1;
  o.steps = 2;
  o.out_dir = dir.string();
  o.console = nullptr;
  const auto rep = run_scaling(default_config(), o);
  REQUIRE(rep.rows.size() == 2);
  CHECK(rep.rows[0].ranks == 2);  // DP 1 x PP 2
  CHECK(rep.rows[1].ranks == 4);
  CHECK(rep.rows[0].microbatches == 8);  // the same global batch of 16
  CHECK(rep.rows[1].microbatches == 4);
  for (const auto& r : rep.rows) {
    REQUIRE(r.tokens_per_s);
    CHECK(*r.tokens_per_s > 0);
    REQUIRE(r.window);
    CHECK(r.window->first_step == 2);
    CHECK(r.window->updates == 2);
  }
  REQUIRE(rep.rows[1].step);
  CHECK(rep.rows[1].step->speedup == doctest::Approx(*rep.rows[1].tokens_per_s / *rep.rows[0].tokens_per_s));
  CHECK(rep.text.find("updates 2-3 after 1 warm-up") != std::string::npos);
  // scaling.txt is what `supervisor plan --scaling` reads.
  const auto points = sched::read_scaling_file((dir / "scaling.txt").string());
  REQUIRE(points.size() == 2);
  CHECK(points[1].gpus == 4);
  CHECK(*points[1].tokens_per_s == doctest::Approx(*rep.rows[1].tokens_per_s).epsilon(1e-3));
  const auto j = nlohmann::json::parse(read(dir / "scaling.json"));
  CHECK(j.at("rows").size() == 2);
  CHECK(j.at("checkpoints_in_window") == false);
  // A size that does not divide the global batch is refused before anything runs.
  o.data_parallel = {3};
  CHECK_THROWS_WITH_AS(run_scaling(default_config(), o), doctest::Contains("--dp 3"), std::invalid_argument);
}
