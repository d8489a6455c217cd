// supervisor compare's logic on runs written by hand: the final timeline of a run that
// restarted and resumed, alignment by input and by loss-bearing tokens, validation loss
// at equal tokens (measured and interpolated), and tokens and wall time to reach each
// run's final validation loss. test/cli/compare.sh runs the command on real runs.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "metrics/compare.h"
#include "metrics/error.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_history.h"
#include "test/support/scratch_dir.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;

namespace {

Json startup(double time) { return {{"type", "startup"}, {"time", time}}; }

// A step of `tokens` input tokens (a tenth of them padding, 90 % loss-bearing) taking
// 0.5 s.
Json step(double time, int64_t n, double loss, int64_t tokens, bool clipped = false, bool recomputed = false) {
  return {{"type", "step"},         {"time", time},
          {"step", n},              {"consumed_samples", n * tokens / 100},
          {"loss", loss},           {"lr", 1e-3},
          {"grad_norm", 1.0},       {"clipped", clipped},
          {"skipped", false},       {"tokens_per_s", 0.0},
          {"input_tokens", tokens}, {"loss_tokens", tokens * 9 / 10},
          {"padding_tokens", tokens / 10}, {"step_time_s", 0.5},
          {"restarts", 0},          {"recomputed", recomputed}};
}

Json eval(double time, int64_t n, double loss) {
  return {{"type", "eval"}, {"time", time}, {"step", n}, {"consumed_samples", 0}, {"loss", loss},
          {"samples", 8},   {"loss_tokens", 100}, {"time_s", 0.1}};
}

// A: 4 steps of 1,000 tokens, passes after steps 0, 2, 4: 5.0, 4.0, 3.5.
RunHistory run_a() {
  return run_history_from("A", {startup(100), eval(100.5, 0, 5.0), step(101, 1, 4.8, 1000), step(102, 2, 4.2, 1000, true),
                                eval(102.2, 2, 4.0), step(103, 3, 3.9, 1000), step(104, 4, 3.6, 1000), eval(104.2, 4, 3.5)},
                          {});
}
// B: the same tokens, a better LR: 5.0, 3.6, 3.0; one spike.
RunHistory run_b() {
  return run_history_from("B", {startup(200), eval(200.5, 0, 5.0), step(201, 1, 4.5, 1000), step(202, 2, 3.8, 1000),
                                eval(202.2, 2, 3.6), step(203, 3, 3.3, 1000), step(204, 4, 3.1, 1000), eval(204.2, 4, 3.0)},
                          {{{"type", "spike"}, {"step", 3}}});
}
// C: a bigger batch, 1,500 tokens a step: passes at 0 and 3,000 tokens.
RunHistory run_c() {
  return run_history_from("C", {startup(300), eval(300.5, 0, 5.0), step(302, 1, 4.4, 1500), step(304, 2, 3.4, 1500),
                                eval(304.5, 2, 3.2)},
                          {});
}

}  // namespace

TEST_CASE("run history: the final timeline of a run that restarted in-run and resumed in a new process") {
  // Steps 1-3, a group restart from step 1 redoes 2 and 3 (other losses), then a new
  // process an hour later resumes after step 3 and does step 4.
  const auto h = run_history_from(
      "R", {startup(1000), step(1001, 1, 5.0, 100), step(1002, 2, 4.0, 100), step(1003, 3, 3.0, 100),
            step(1005, 2, 4.1, 100, false, true), eval(1005.5, 2, 4.5), step(1006, 3, 3.1, 100, true, true),
            startup(5000), step(5002, 4, 2.9, 100)},
      {{{"type", "spike"}, {"step", 3}}, {{"type", "spike"}, {"step", 3}}, {{"type", "spike"}, {"step", 4}}});
  REQUIRE(h.steps.size() == 4);
  CHECK(h.steps[1].record.loss == 4.1);
  CHECK(h.steps[2].record.loss == 3.1);
  CHECK(h.steps[3].at.input_tokens == 400);
  CHECK(h.steps[3].at.loss_tokens == 360);
  CHECK(h.steps[3].at.real_tokens == 360);
  CHECK(h.steps[3].at.train_s == 2.0);
  // The first process ran 1000 -> 1006 (6 s), the second is at 2 s past its start.
  CHECK(h.steps[2].at.wall_s == 6.0);
  CHECK(h.steps[3].at.wall_s == 8.0);
  REQUIRE(h.evals.size() == 1);
  CHECK(h.evals[0].loss == 4.5);
  CHECK(h.evals[0].at.step == 2);
  CHECK(h.evals[0].at.input_tokens == 200);
  CHECK(h.evals[0].at.wall_s == 5.5);
  CHECK(h.spikes == 2);  // steps 3 (twice on record) and 4
  CHECK(h.clipped == 1);
  CHECK(h.skipped == 0);
}

TEST_CASE("compare: validation loss at equal tokens, and the cost of reaching each final loss") {
  const auto c = compare_runs({run_a(), run_b(), run_c()});
  REQUIRE(c.runs.size() == 3);
  CHECK(c.runs[0].steps == 4);
  CHECK(c.runs[0].tokens == 4000);
  CHECK(c.runs[0].final_loss == 3.6);
  CHECK(c.runs[0].final_eval == 3.5);
  CHECK(c.runs[0].tokens_per_s == doctest::Approx(3600.0 / 2.0));
  CHECK(c.runs[0].clipped == 1);
  CHECK(c.runs[1].spikes == 1);
  CHECK(c.runs[2].tokens == 3000);
  CHECK(c.runs[2].wall_s == 4.5);

  // C's passes end at 3,000 tokens: the common span is 0 .. 3,000.
  CHECK(c.grid == std::vector<int64_t>{0, 2000, 3000});
  REQUIRE(c.eval_at.size() == 3);
  CHECK(c.eval_at[0][0]->loss == 5.0);
  CHECK(c.eval_at[1][1]->loss == 3.6);
  CHECK_FALSE(c.eval_at[1][1]->interpolated);
  CHECK(c.eval_at[1][2]->interpolated);  // C between 0 (5.0) and 3,000 (3.2)
  CHECK(c.eval_at[1][2]->loss == doctest::Approx(5.0 - 2.0 / 3.0 * 1.8));
  CHECK(c.eval_at[2][0]->loss == doctest::Approx(3.75));  // A between 2,000 (4.0) and 4,000 (3.5)
  CHECK(c.eval_at[2][0]->interpolated);

  REQUIRE(c.targets.size() == 3);
  // A's 3.5: A at step 4, B at step 4 (3.6 at step 2 is not yet), C at its step 2.
  CHECK(c.targets[0].loss == 3.5);
  CHECK(c.targets[0].reach[0]->tokens == 4000);
  CHECK(c.targets[0].reach[0]->wall_s == doctest::Approx(4.2));
  CHECK(c.targets[0].reach[1]->step == 4);
  CHECK(c.targets[0].reach[2]->tokens == 3000);
  CHECK(c.targets[0].reach[2]->wall_s == doctest::Approx(4.5));
  // B's 3.0 only B reaches.
  CHECK_FALSE(c.targets[1].reach[0]);
  CHECK(c.targets[1].reach[1]->tokens == 4000);
  CHECK_FALSE(c.targets[1].reach[2]);

  const std::string text = format_comparison(c);
  CAPTURE(text);
  CHECK(text.find("3 runs, aligned by input tokens (samples x seq_length)\n") == 0);
  CHECK(text.find("\nA         4         4,000      3.6000      3.5000       1.8 k       2.00s       4.20s       0"
                  "        0        1\n") != std::string::npos);
  CHECK(text.find("\n         3,000             ~3.7500             ~3.3000              3.2000\n") !=
        std::string::npos);
  CHECK(text.find("\nB 3.0000                        -       4,000 (4.20s)                   -\n") !=
        std::string::npos);
}

TEST_CASE("compare: aligned by loss-bearing tokens; a run without validation") {
  const auto nothing = run_history_from("N", {startup(0), step(1, 1, 4.0, 1000)}, {});
  const auto c = compare_runs({run_a(), nothing}, {TokenAxis::LossBearing, 12});
  CHECK(c.runs[0].tokens == 3600);
  CHECK_FALSE(c.runs[1].final_eval);
  CHECK(c.grid == std::vector<int64_t>{0, 1800, 3600});  // A's passes alone
  CHECK_FALSE(c.eval_at[1][1]);
  REQUIRE(c.targets.size() == 1);
  CHECK(c.targets[0].reach[0]->tokens == 3600);
  CHECK_FALSE(c.targets[0].reach[1]);
  CHECK(format_comparison(c).find("aligned by loss-bearing tokens") != std::string::npos);
}

TEST_CASE("compare: a long grid is thinned to max_rows, the last count kept") {
  std::vector<Json> lines{startup(0), eval(0, 0, 6.0)};
  for (int n = 1; n <= 40; ++n) {
    lines.push_back(step(n, n, 5.0, 100));
    lines.push_back(eval(n, n, 6.0 - 0.1 * n));
  }
  const auto h = run_history_from("L", lines, {});
  const auto c = compare_runs({h, h}, {TokenAxis::Input, 5});
  CHECK(c.grid == std::vector<int64_t>{0, 1000, 2000, 3000, 4000});
}

TEST_CASE("run history from a directory: missing or empty metrics.jsonl is an error naming it") {
  ScratchDir dir;
  CHECK_THROWS_WITH_AS(load_run_history(dir.path()),
                       (dir / "metrics.jsonl" + ": no such file (is " + dir.path() + " a run directory?)").c_str(),
                       MetricsError);
  JsonlLog(dir / "metrics.jsonl").write(startup(1));
  CHECK_THROWS_WITH_AS(load_run_history(dir.path()), (dir.path() + "/metrics.jsonl: no step records").c_str(),
                       MetricsError);
  {
    JsonlLog log(dir / "metrics.jsonl");
    log.write(step(2, 1, 4.0, 100));
    log.write({{"type", "eval"}, {"time", 3}, {"step", 1}});  // no loss
  }
  CHECK_THROWS_WITH_AS(load_run_history(dir.path()),
                       (dir.path() + "/metrics.jsonl: object 3: " +
                        "[json.exception.out_of_range.403] key 'loss' not found")
                           .c_str(),
                       MetricsError);
  JsonlLog(dir / "spikes.jsonl").write({{"type", "spike"}, {"step", 1}});
  std::filesystem::remove(dir / "metrics.jsonl");
  {
    JsonlLog log(dir / "metrics.jsonl");
    log.write(step(2, 1, 4.0, 100));
  }
  CHECK(load_run_history(dir.path()).spikes == 1);
}
