// Tensor parallelism through the actor runtime (actors::run_training): the same data,
// initial weights and global batch as the single-device compute core
// (engine::ReferenceTrainer), compared after 1 and after 3 updates, for TP2, TP2 with
// sequence parallelism, TP2 x PP2 and TP2 x PP2 x DP2 (8 stage actors).
//
// Tolerances, fixed before any run (test/actors/parity_check.h, shared with test_runtime):
// tensor parallelism, like data and pipeline parallelism, changes only the
// association of fp32 sums (row-parallel GEMM partial sums, the vocabulary-parallel
// log-sum-exp, the sequence-parallel LayerNorm gradients), about 1e-7 relative per
// sum; AdamW's update lr * mhat / (sqrt(vhat) + eps) carries that into the weights
// scaled by lr = 1e-3.
//   - loss and global gradient norm of each step: relative difference <= 1e-5
//   - every parameter: max |runtime - reference| <= 1e-5 (1% of one step of size lr)
//   - Adam moments, per tensor: max |runtime - reference| <= 1e-4 * max |reference|
// assemble_state also checks that the replicated tensors (LayerNorms, wpe, the
// row-parallel biases) and their moments are bitwise identical on both TP ranks.
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

Config tiny(int tp, bool sp, int pp, int dp) {
  Config c = parity_layout(dp, pp, "troupe-tp-runtime-test");
  c.mutable_parallel()->set_tensor(tp);
  c.mutable_parallel()->set_sequence_parallel(sp);
  return c;
}

}  // namespace

TEST_CASE("TP2 matches the single-device run") { check_layout(tiny(2, false, 1, 1)); }

TEST_CASE("TP2 with sequence parallelism matches the single-device run") { check_layout(tiny(2, true, 1, 1)); }

TEST_CASE("TP2 x PP2 matches the single-device run (with and without sequence parallelism)") {
  SUBCASE("TP2 x PP2") { check_layout(tiny(2, false, 2, 1)); }
  SUBCASE("TP2 x PP2, sequence parallel") { check_layout(tiny(2, true, 2, 1)); }
}

TEST_CASE("TP2 x PP2 x DP2 (8 stage actors) matches the single-device run") {
  SUBCASE("TP2 x PP2 x DP2") { check_layout(tiny(2, false, 2, 2)); }
  SUBCASE("TP2 x PP2 x DP2, sequence parallel") { check_layout(tiny(2, true, 2, 2)); }
}

TEST_CASE("a Llama matches the single-device run: TP2 (kv heads split and replicated), TP2+SP, DP2 x PP2 x TP2") {
  SUBCASE("TP2, 2 kv heads split") { check_layout(as_llama(tiny(2, false, 1, 1), 2)); }
  SUBCASE("TP2, one kv head replicated") { check_layout(as_llama(tiny(2, false, 1, 1), 1)); }
  SUBCASE("TP2, sequence parallel") { check_layout(as_llama(tiny(2, true, 1, 1), 2)); }
  SUBCASE("TP2 x PP2 x DP2, sequence parallel") { check_layout(as_llama(tiny(2, true, 2, 2), 2)); }
}

TEST_CASE("with hidden and attention dropout 0.1, TP layouts draw the single device's masks") {
  // Masks are keyed by global head and column and by the token's row in the whole
  // microbatch, so a rank's heads and its sequence-parallel rows draw what one device
  // draws. Tolerances: those of the undropped runs.
  auto dropout = [](Config c) {
    c.mutable_model()->set_hidden_dropout(0.1f);
    c.mutable_model()->set_attention_dropout(0.1f);
    return c;
  };
  SUBCASE("Llama TP2, one kv head replicated") { check_layout(dropout(as_llama(tiny(2, false, 1, 1), 1))); }
  SUBCASE("Llama TP2 x PP2 x DP2, sequence parallel") { check_layout(dropout(as_llama(tiny(2, true, 2, 2), 2))); }
  SUBCASE("GPT-2 TP2, sequence parallel") { check_layout(dropout(tiny(2, true, 1, 1))); }
}

TEST_CASE("two TP2 x PP2 runs with sequence parallelism are bitwise identical") {
  const Config c = with_steps(tiny(2, true, 2, 1), 3);
  check_bitwise(run(c), run(c));
}

TEST_CASE("recomputation under TP2 x PP2 with sequence parallelism gives the bits of none (GPT-2, dropout on)") {
  // A replayed forward issues its collectives again, in the same order on every rank.
  Config c = with_steps(tiny(2, true, 2, 1), 3);
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  const auto none = run(c);
  SUBCASE("selective") {
    c.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
    check_bitwise(run(c), none);
  }
  SUBCASE("full, uniform") {
    c.mutable_model()->set_recompute(ModelConfig::FULL);
    check_bitwise(run(c), none);
  }
}

TEST_CASE("ZB-H1 under TP2 x PP2 with sequence parallelism gives 1F1B's bits (Llama and GPT-2, dropout on)") {
  // The split backward issues each layer's tensor-parallel collectives in its input
  // pass, in the whole backward's order on every rank (tp_split_backward_test); the
  // weight passes run none. Tolerance: none (bitwise), as for every schedule of one
  // layout.
  auto check = [](Config c) {
    c = with_steps(c, 3);
    c.mutable_model()->set_hidden_dropout(0.1f);
    c.mutable_model()->set_attention_dropout(0.1f);
    const auto one_f_one_b = run(c);
    c.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
    check_bitwise(run(c), one_f_one_b);
  };
  SUBCASE("GPT-2") { check(tiny(2, true, 2, 1)); }
  SUBCASE("Llama, 2 kv heads") { check(as_llama(tiny(2, true, 2, 1), 2)); }
}
