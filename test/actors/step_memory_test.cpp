// The memory each stage reports in the step record and metrics.jsonl (docs/metrics.md,
// "Memory"), through the real actor runtime: the split adds up to the peak, weights
// and gradients are the stage's parameter bytes, the Adam moments (the rank's
// optimizer shard shares the stage's device) twice that without data parallelism,
// the saved activations are exactly the planner's figure for the stage, and they
// shrink from NONE to SELECTIVE to FULL, for GPT-2 and Llama.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "actors/runtime.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"
#include "test/actors/parity_check.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::vector<metrics::StepRecord> jsonl_steps(const Config& c) {
  std::vector<metrics::StepRecord> out;
  for (const auto& j : metrics::read_jsonl(metrics::run_dir_layout(c.logging().run_dir()).metrics).objects)
    if (j.value("type", "") == "step") out.push_back(metrics::step_from_json(j));
  return out;
}

void check_family(bool llama) {
  CAPTURE(llama);
  std::vector<int64_t> activations_by_mode;
  for (const auto mode : {ModelConfig::NONE, ModelConfig::SELECTIVE, ModelConfig::FULL}) {
    CAPTURE(ModelConfig::Recompute_Name(mode));
    Config c = with_steps(parity_layout(1, 2, std::string("troupe-step-memory-") + (llama ? "llama-" : "gpt2-") +
                                                  ModelConfig::Recompute_Name(mode)),
                          2);
    if (llama) c = as_llama(c);
    c.mutable_model()->set_recompute(mode);
    std::filesystem::remove_all(c.logging().run_dir());  // metrics.jsonl of this run only
    const auto r = run(c);
    REQUIRE(r.outcome.steps.size() == 2);
    int64_t activations = 0;
    for (const auto& s : r.outcome.steps) {
      CAPTURE(s.step);
      REQUIRE(s.stage_memory.size() == 2);
      for (const auto& m : s.stage_memory) {
        CAPTURE(m.stage);
        CHECK(m.peak() == m.weights + m.gradients + m.optimizer_state + m.activations + m.scratch);
        CHECK(m.weights > 0);
        CHECK(m.gradients == m.weights);
        CHECK(m.optimizer_state == 2 * m.weights);  // m and v of the whole range (DP 1)
        CHECK(m.activations == m.planned_activations);
        CHECK(m.scratch > 0);
        if (s.step == 1) activations += m.activations;
      }
      // Static slots: the second step holds what the first did.
      CHECK(s.stage_memory[0].peak() == r.outcome.steps[0].stage_memory[0].peak());
    }
    activations_by_mode.push_back(activations);
    // metrics.jsonl has the same figures.
    const auto written = jsonl_steps(c);
    REQUIRE(written.size() == 2);
    for (size_t i = 0; i < 2; ++i)
      for (size_t k = 0; k < 2; ++k) {
        const auto& a = written[i].stage_memory.at(k);
        const auto& b = r.outcome.steps[i].stage_memory.at(k);
        CHECK(a.stage == b.stage);
        CHECK(a.peak() == b.peak());
        CHECK(a.activations == b.activations);
        CHECK(a.planned_activations == b.planned_activations);
        CHECK(a.optimizer_state == b.optimizer_state);
      }
  }
  CHECK(activations_by_mode[1] < activations_by_mode[0]);  // SELECTIVE < NONE
  CHECK(activations_by_mode[2] < activations_by_mode[1]);  // FULL < SELECTIVE
}

}  // namespace

TEST_CASE("step records carry each stage's memory peak, split, beside the planner's activations (GPT-2)") {
  check_family(false);
}

TEST_CASE("step records carry each stage's memory peak, split, beside the planner's activations (Llama)") {
  check_family(true);
}

TEST_CASE("under ZB_H1 each stage's saved activations are the planner's, the deferred gradients included") {
  // The slots keep each deferred weight GEMM's output gradient from B to W: more than
  // 1F1B's on every stage of the same layout.
  auto peaks = [](ParallelConfig::Schedule schedule) {
    Config c = with_steps(parity_layout(1, 2, std::string("troupe-step-memory-") +
                                                  ParallelConfig::Schedule_Name(schedule)),
                          2);
    c.mutable_parallel()->set_schedule(schedule);
    const auto r = run(c);
    REQUIRE(r.outcome.steps.size() == 2);
    std::vector<int64_t> out;
    for (const auto& m : r.outcome.steps[1].stage_memory) {
      CAPTURE(m.stage);
      CHECK(m.activations == m.planned_activations);
      out.push_back(m.activations);
    }
    return out;
  };
  const auto zb = peaks(ParallelConfig::ZB_H1), one_f_one_b = peaks(ParallelConfig::ONE_F_ONE_B);
  REQUIRE(zb.size() == 2);
  REQUIRE(one_f_one_b.size() == 2);
  CHECK(zb[0] > one_f_one_b[0]);
  CHECK(zb[1] > one_f_one_b[1]);
}
