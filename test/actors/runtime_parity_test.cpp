// The acceptance ladder's "Second" part (docs/acceptance.md, "Where the rungs come
// from"): the same data, initial weights and global batch through
// every parallel layout of the actor runtime, compared with the single-device
// compute core (engine::ReferenceTrainer) after 1 and after 3 updates.
//
// Tolerances (test/actors/parity_check.h, fixed before any run and never widened):
//   Data parallelism, pipeline accumulation and the tied-embedding sum change only
//   the association of fp32 gradient sums (at most 8 microbatches here), about
//   8 * 6e-8 relative to the gradients. AdamW's update is lr * mhat / (sqrt(vhat) +
//   eps), a ratio of the moments, so that relative error reaches the parameters
//   scaled by lr = 1e-3.
//   - loss of each step: relative difference <= 1e-5
//   - every parameter: max |runtime - reference| <= 1e-5 (1% of one step of size lr)
//   - Adam moments, per tensor: max |runtime - reference| <= 1e-4 * max |reference|
#include <doctest/doctest.h>

#include <cmath>

#include "actors/runtime.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "engine/reference_trainer.h"
#include "test/actors/parity_check.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

Config tiny(int dp, int pp, ParallelConfig::Schedule schedule = ParallelConfig::ONE_F_ONE_B,
            bool distributed = true) {
  Config c = parity_layout(dp, pp, "troupe-runtime-test");
  c.mutable_parallel()->set_schedule(schedule);
  c.mutable_parallel()->set_distributed_optimizer(distributed);
  return c;
}

}  // namespace

TEST_CASE("data parallel: DP2 and DP4 match the single-device run") {
  SUBCASE("DP2") { check_layout(tiny(2, 1)); }
  SUBCASE("DP4") { check_layout(tiny(4, 1)); }
}

TEST_CASE("pipeline parallel: PP2 and PP4, GPipe and 1F1B, match the single-device run") {
  SUBCASE("PP2 GPipe") { check_layout(tiny(1, 2, ParallelConfig::GPIPE)); }
  SUBCASE("PP2 1F1B") { check_layout(tiny(1, 2, ParallelConfig::ONE_F_ONE_B)); }
  SUBCASE("PP4 GPipe") { check_layout(tiny(1, 4, ParallelConfig::GPIPE)); }
  SUBCASE("PP4 1F1B") { check_layout(tiny(1, 4, ParallelConfig::ONE_F_ONE_B)); }
}

TEST_CASE("GPipe gives 1F1B's bits on the same layout (PP2, DP2 x PP4, Llama PP2)") {
  // Tolerance: none. The stages hold the same layers and each parameter's gradient adds
  // its microbatches in microbatch order under both (every stage runs its backwards in
  // microbatch order); only when each op runs differs. The interleaved and zero-bubble
  // schedules have their own bitwise comparisons (interleaved_run_test.cpp,
  // zero_bubble_run_test.cpp).
  auto check = [](Config c) {
    c = with_steps(c, 3);
    const auto one_f_one_b = run(c);
    c.mutable_parallel()->set_schedule(ParallelConfig::GPIPE);
    check_bitwise(run(c), one_f_one_b);
  };
  SUBCASE("PP2") { check(tiny(1, 2)); }
  SUBCASE("DP2 x PP4") { check(tiny(2, 4)); }
  SUBCASE("Llama PP2") { check(as_llama(tiny(1, 2))); }
}

TEST_CASE("DP2 x PP2 matches the single-device run") { check_layout(tiny(2, 2)); }

TEST_CASE("a Llama (grouped-query, rotary, SwiGLU, untied head) matches the single-device run in every layout") {
  SUBCASE("DP2") { check_layout(as_llama(tiny(2, 1))); }
  SUBCASE("PP2 1F1B") { check_layout(as_llama(tiny(1, 2))); }
  SUBCASE("PP2 GPipe, tied head") {
    Config c = as_llama(tiny(1, 2, ParallelConfig::GPIPE));
    c.mutable_model()->set_tied_embeddings(true);
    check_layout(c);
  }
  SUBCASE("DP2 x PP2") { check_layout(as_llama(tiny(2, 2))); }
  SUBCASE("DP2 x PP2 with hidden and attention dropout 0.1") {
    // The masks follow the sample slot and the global layer, so every layout draws
    // the reference's masks; the tolerances stay those of the undropped runs.
    Config c = as_llama(tiny(2, 2));
    c.mutable_model()->set_hidden_dropout(0.1f);
    c.mutable_model()->set_attention_dropout(0.1f);
    check_layout(c);
  }
}

TEST_CASE("GPT-2 with hidden and attention dropout: DP2 x PP2 matches the single-device run") {
  Config c = tiny(2, 2);
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  check_layout(c);
}

TEST_CASE("the distributed optimizer matches unsharded AdamW") {
  // Unsharded: every replica all-reduces and updates the whole stage.
  check_layout(tiny(2, 2, ParallelConfig::ONE_F_ONE_B, false));
  const auto a = run(with_steps(tiny(2, 2, ParallelConfig::ONE_F_ONE_B, true), 3));
  const auto b = run(with_steps(tiny(2, 2, ParallelConfig::ONE_F_ONE_B, false), 3));
  // Both hold the same elementwise AdamW state; only the norm's partial sums are
  // grouped differently, so they agree within the same tolerances.
  for (const auto& [name, values] : a.state->params) {
    CAPTURE(name);
    const auto& other = b.state->params.at(name);
    CHECK(max_diff(values.data(), other.data(), values.size()) <= kParamAbs);
    const auto& m = b.state->exp_avg.at(name);
    CHECK(max_diff(a.state->exp_avg.at(name).data(), m.data(), m.size()) <= kMomentRel * max_abs(m.data(), m.size()));
  }
}

TEST_CASE("a non-finite gradient on one replica skips the update everywhere and holds the LR") {
  Config c = with_steps(tiny(2, 2), 3);
  auto* f = c.mutable_faults()->add_fault();
  f->set_actor("stage/dp1/pp0/tp0");
  f->set_step(2);
  f->set_phase(Fault::BACKWARD);
  f->set_kind(Fault::NAN_GRADIENT);
  f->set_microbatch(1);
  const auto r = run(c);
  REQUIRE(r.outcome.steps.size() == 3);
  CHECK_FALSE(r.outcome.steps[0].skipped);
  CHECK(r.outcome.steps[1].skipped);
  CHECK_FALSE(std::isfinite(r.outcome.steps[1].grad_norm));
  CHECK_FALSE(r.outcome.steps[2].skipped);
  // The LR did not advance: step 3 uses the LR step 2 would have used.
  CHECK(r.outcome.steps[2].lr == r.outcome.steps[1].lr);
  // Consumed samples advance on the skipped step.
  CHECK(r.outcome.steps[2].consumed_samples == 24);
  CHECK(r.state->adam_steps == 2);

  // Equal to a clean run of 2 updates whose second update reads step 3's batch: the
  // skipped step changed nothing but the data position.
  Reference ref(with_steps(tiny(2, 2), 3), 1);
  const auto src = data::BatchSource::open(c);
  std::vector<data::Microbatch> third;
  for (int d = 0; d < 2; ++d)
    for (int j = 0; j < 4; ++j) third.push_back(src.microbatch(16, d, j));
  ref.reports.push_back(ref.trainer.step(third));
  actors::RunResult trimmed = r;
  trimmed.outcome.steps.erase(trimmed.outcome.steps.begin() + 1);
  compare(trimmed, ref);
}

TEST_CASE("two runs of the same config give bitwise identical losses and weights") {
  const Config c = with_steps(tiny(2, 2), 3);
  check_bitwise(run(c), run(c));
}

TEST_CASE("recomputation in the actor runtime gives the bits of none: a Llama with dropout, DP2 x PP2") {
  Config c = with_steps(as_llama(tiny(2, 2)), 3);
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  const auto none = run(c);
  SUBCASE("selective") {
    c.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
    check_bitwise(run(c), none);
  }
  SUBCASE("full, block of 1 layer per stage") {
    c.mutable_model()->set_recompute(ModelConfig::FULL);
    c.mutable_model()->set_recompute_method(ModelConfig::BLOCK);
    check_bitwise(run(c), none);
  }
}
