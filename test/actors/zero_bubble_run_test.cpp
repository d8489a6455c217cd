// The zero-bubble schedule run by the stage actors (parallel.schedule ZB_H1): each
// backward is split into an input pass (B: the input gradient handed to the previous
// stage at once) and a weight pass (W: the weight GEMMs, run later to fill the
// cool-down; sched/pipeline_schedule.h), each slot kept until its W.
//
// What must hold, fixed before any run:
//   - bitwise equal to ONE_F_ONE_B of the same layout: every step's loss and global
//     gradient norm, the evaluation losses, the final parameters and Adam moments. Each
//     stage holds the same layers as under 1F1B and its split backward adds the same
//     bits as the whole one (test_model, split_backward_test), each parameter's
//     additions in microbatch order (B's and W's each run in microbatch order), so
//     nothing may differ, not even the norm's partial sums;
//   - the single-device reference's tolerances (test/actors/parity_check.h), as for
//     every layout.
#include <doctest/doctest.h>

#include "actors/runtime.h"
#include "engine/topology.h"
#include "sched/pipeline_schedule.h"
#include "test/actors/parity_check.h"
#include "test/support/same_state.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

Config zero_bubble(Config c) {
  c.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
  c.mutable_logging()->set_run_dir(c.logging().run_dir() + "-zb");
  return c;
}

// `c` (ONE_F_ONE_B) against itself under ZB_H1, and the ZB_H1 run against the
// single-device reference.
void check_zero_bubble(const Config& c, int steps = 3) {
  const Config base = with_steps(c, steps);
  const Config zb = zero_bubble(base);
  const auto want = run(base);
  const auto got = run(zb);
  check_bitwise(got, want);
  REQUIRE(got.outcome.evals.size() == want.outcome.evals.size());
  for (size_t i = 0; i < got.outcome.evals.size(); ++i) {
    CAPTURE(i);
    CHECK(got.outcome.evals[i].loss == want.outcome.evals[i].loss);
  }
  // The stages ran the weight passes the schedule lists, one per microbatch: what each
  // step's timing records op by op.
  const auto schedule = sched::build_pipeline_schedule(zb);
  const auto ranks = engine::Topology::logical(zb).all_ranks();  // the timings' order
  REQUIRE(got.outcome.step_timings.size() == size_t(steps));
  for (const auto& step : got.outcome.step_timings) {
    REQUIRE(step.size() == ranks.size());
    for (size_t i = 0; i < step.size(); ++i) {
      CAPTURE(i);
      int32_t weights = 0;
      for (const uint8_t kind : step[i].op_kinds) weights += kind == uint8_t(sched::OpKind::Weight);
      CHECK(step[i].op_kinds.size() == schedule.ops[size_t(ranks[i].pp)].size());
      CHECK(weights == schedule.microbatches);
    }
  }
  Reference ref(zb, steps);
  compare(got, ref);
}

}  // namespace

TEST_CASE("ZB-H1: PP2 equals 1F1B bitwise and the single-device run, evaluation included") {
  Config c = parity_layout(1, 2, "troupe-zb-pp2");
  c.mutable_training()->set_eval_interval(2);
  c.mutable_training()->set_eval_samples(16);
  check_zero_bubble(c);
}

TEST_CASE("ZB-H1: DP2 x PP2, PP4 (8 layers), and PP4 with fewer microbatches than stages") {
  SUBCASE("DP2 x PP2") { check_zero_bubble(parity_layout(2, 2, "troupe-zb-dp2")); }
  SUBCASE("PP4, 8 microbatches") {
    Config c = parity_layout(1, 4, "troupe-zb-pp4");
    c.mutable_model()->set_layers(8);
    check_zero_bubble(c);
  }
  SUBCASE("PP4, 2 microbatches (the pipeline never fills)") {
    Config c = parity_layout(1, 4, "troupe-zb-pp4-m2");
    c.mutable_model()->set_layers(4);
    c.mutable_batch()->set_global_batch_size(2);
    c.mutable_lr_schedule()->set_warmup_samples(2);
    check_zero_bubble(c);
  }
}

TEST_CASE("ZB-H1: a Llama with hidden and attention dropout 0.1 equals 1F1B bitwise") {
  Config c = as_llama(parity_layout(1, 2, "troupe-zb-llama"));
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  check_zero_bubble(c);
}
