// Activation recomputation (model.recompute; docs/compute.md, "Recomputation") on one
// device: SELECTIVE and FULL (UNIFORM and BLOCK) give the bits of NONE, for both
// families, with dropout on (the masks are drawn again from their counters), for two
// microbatches in flight at once (the recompute and replay buffers are shared by the
// slots), and keep fewer floats per slot. Exact equality: recomputation runs the same
// kernels on the same inputs.
#include <doctest/doctest.h>

#include <cstring>

#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

struct Result {
  double loss = 0;
  std::vector<float> grads;
  int64_t slot_floats = 0, scratch_floats = 0;
};

// Two microbatches forwarded into two slots, then both backwards (1F1B's overlap).
Result run(Config c, ModelConfig::Recompute mode, ModelConfig::RecomputeMethod method = ModelConfig::UNIFORM) {
  c.mutable_model()->set_recompute(mode);
  c.mutable_model()->set_recompute_method(method);
  c.mutable_model()->set_recompute_num_layers(1);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 2);
  jitter_parameters(stage, 0.1, 21);
  auto mbs = packed_batches();
  mbs[0].first_slot = 0;
  mbs[1].first_slot = mbs[0].batch;
  stage.zero_grads();
  Result r;
  r.loss = stage.forward(0, mbs[0]).loss_sum + stage.forward(1, mbs[1]).loss_sum;
  stage.backward(1);
  stage.backward(0);
  r.grads = to_host(dev, stage.grads(), stage.param_count());
  r.slot_floats = stage.slot_floats();
  r.scratch_floats = stage.scratch_floats();
  return r;
}

void check_same_as_none(const Config& c) {
  const Result none = run(c, ModelConfig::NONE);
  struct Case {
    const char* name;
    ModelConfig::Recompute mode;
    ModelConfig::RecomputeMethod method;
  };
  for (const Case k : {Case{"selective", ModelConfig::SELECTIVE, ModelConfig::UNIFORM},
                       Case{"full uniform", ModelConfig::FULL, ModelConfig::UNIFORM},
                       Case{"full block 1", ModelConfig::FULL, ModelConfig::BLOCK}}) {
    CAPTURE(k.name);
    const Result r = run(c, k.mode, k.method);
    CHECK(r.loss == none.loss);
    REQUIRE(r.grads.size() == none.grads.size());
    CHECK(std::memcmp(r.grads.data(), none.grads.data(), r.grads.size() * sizeof(float)) == 0);
    CHECK(r.slot_floats < none.slot_floats);
    CHECK(r.scratch_floats > none.scratch_floats);  // what the slots no longer hold, once
  }
}

}  // namespace

TEST_CASE("recomputation gives the bits of none: GPT-2, with dropout") {
  Config c = tiny_config();
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  check_same_as_none(c);
}

TEST_CASE("recomputation gives the bits of none: Llama (grouped-query), with dropout") {
  Config c = tiny_llama_config();
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  check_same_as_none(c);
}

TEST_CASE("full recomputation keeps only the layer inputs of the replayed layers") {
  const Config c = tiny_llama_config();
  const Result none = run(c, ModelConfig::NONE);
  const Result block = run(c, ModelConfig::FULL, ModelConfig::BLOCK);      // 1 of 2 layers replayed
  const Result uniform = run(c, ModelConfig::FULL, ModelConfig::UNIFORM);  // both replayed
  const int64_t per_layer = none.slot_floats - block.slot_floats;
  CHECK(per_layer > 0);
  CHECK(none.slot_floats - uniform.slot_floats == 2 * per_layer);
}
