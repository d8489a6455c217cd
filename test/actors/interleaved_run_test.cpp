// The interleaved 1F1B schedule run by the stage actors (parallel.schedule
// INTERLEAVED_1F1B, parallel.virtual_stages v): each stage holds v model chunks, the
// last stage's chunk c feeds the first stage's chunk c + 1.
//
// What must hold, fixed before any run:
//   - bitwise equal to ONE_F_ONE_B of the same layout: every step's loss and the final
//     parameters and Adam moments (each layer runs the same kernels on the same inputs,
//     and each parameter's gradient adds its microbatches in microbatch order under
//     both schedules: the interleaved one runs each chunk's backwards in microbatch
//     order);
//   - the global gradient norm within 1e-12 relative of 1F1B's: the stages hold other
//     layers than under 1F1B, so the per-stage partial sums of squares (double) are
//     associated differently; the clip factor and everything after it are compared
//     bitwise through the weights;
//   - the single-device reference's tolerances (test/actors/parity_check.h), as for
//     every layout;
//   - evaluation passes (forwards only, through the chunks in groups of p) give 1F1B's
//     losses bitwise.
#include <doctest/doctest.h>

#include <cmath>

#include "actors/runtime.h"
#include "test/actors/parity_check.h"
#include "test/support/same_state.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kNormRel = 1e-12;

Config interleaved(Config c, int v) {
  c.mutable_parallel()->set_schedule(ParallelConfig::INTERLEAVED_1F1B);
  c.mutable_parallel()->set_virtual_stages(v);
  c.mutable_logging()->set_run_dir(c.logging().run_dir() + "-interleaved");
  return c;
}

void check_same_as_1f1b(const actors::RunResult& got, const actors::RunResult& want) {
  REQUIRE(got.outcome.steps.size() == want.outcome.steps.size());
  for (size_t s = 0; s < got.outcome.steps.size(); ++s) {
    CAPTURE(s);
    const auto& a = got.outcome.steps[s];
    const auto& b = want.outcome.steps[s];
    CHECK(a.step == b.step);
    CHECK(a.loss == b.loss);
    CHECK(a.loss_tokens == b.loss_tokens);
    CHECK(std::abs(a.grad_norm - b.grad_norm) <= kNormRel * std::abs(b.grad_norm));
  }
  REQUIRE(got.outcome.evals.size() == want.outcome.evals.size());
  for (size_t i = 0; i < got.outcome.evals.size(); ++i) {
    CAPTURE(i);
    CHECK(got.outcome.evals[i].loss == want.outcome.evals[i].loss);
  }
  check_same_state(*got.state, *want.state);
}

// `c` (ONE_F_ONE_B) against itself interleaved with v chunks, and the interleaved run
// against the single-device reference.
void check_interleaved(const Config& c, int v, int steps = 3) {
  const Config base = with_steps(c, steps);
  const Config inter = interleaved(base, v);
  const auto want = run(base);
  const auto got = run(inter);
  check_same_as_1f1b(got, want);
  Reference ref(inter, steps);
  compare(got, ref);
}

}  // namespace

TEST_CASE("interleaved 1F1B: PP2 with 2 chunks a stage equals 1F1B bitwise and the single-device run") {
  Config c = parity_layout(1, 2, "troupe-interleaved-pp2");
  c.mutable_training()->set_eval_interval(2);
  c.mutable_training()->set_eval_samples(16);  // 16 microbatches: more than any chunk's slots
  check_interleaved(c, 2);
}

TEST_CASE("interleaved 1F1B: DP2 x PP2, PP2 x 4 chunks and PP4 x 2 chunks (8 layers)") {
  SUBCASE("DP2 x PP2, v = 2") { check_interleaved(parity_layout(2, 2, "troupe-interleaved-dp2"), 2); }
  SUBCASE("PP2, v = 4") {
    Config c = parity_layout(1, 2, "troupe-interleaved-v4");
    c.mutable_model()->set_layers(8);
    check_interleaved(c, 4);
  }
  SUBCASE("PP4, v = 2") {
    Config c = parity_layout(1, 4, "troupe-interleaved-pp4");
    c.mutable_model()->set_layers(8);
    c.mutable_training()->set_eval_interval(3);
    c.mutable_training()->set_eval_samples(12);  // 12 microbatches: groups of 4
    check_interleaved(c, 2);
  }
}

TEST_CASE("interleaved 1F1B: a Llama with dropout, and full recomputation, equal 1F1B bitwise") {
  SUBCASE("Llama PP2 v2, hidden and attention dropout 0.1") {
    Config c = as_llama(parity_layout(1, 2, "troupe-interleaved-llama"));
    c.mutable_model()->set_hidden_dropout(0.1f);
    c.mutable_model()->set_attention_dropout(0.1f);
    check_interleaved(c, 2);
  }
  SUBCASE("GPT-2 PP2 v2, FULL BLOCK recomputation of 1 layer a chunk (8 layers)") {
    Config c = parity_layout(1, 2, "troupe-interleaved-recompute");
    c.mutable_model()->set_layers(8);
    c.mutable_model()->set_recompute(ModelConfig::FULL);
    c.mutable_model()->set_recompute_method(ModelConfig::BLOCK);
    c.mutable_model()->set_recompute_num_layers(1);
    const Config base = with_steps(c, 2);
    // Against plain 1F1B without recomputation: recomputation gives the same bits.
    Config plain = base;
    plain.mutable_model()->set_recompute(ModelConfig::NONE);
    check_same_as_1f1b(run(interleaved(base, 2)), run(plain));
  }
}
