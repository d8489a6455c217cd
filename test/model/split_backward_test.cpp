// The split backward of ZB-H1 (GptStage::backward_input then backward_weight;
// docs/compute.md, "Split backward") against the whole backward, on one device: GPT-2
// and Llama, head tied and untied, 1 and 2 compute threads, with dropout on, for a
// whole-model stage and for the two stages of a pipeline cut (the input gradient
// handed back and the output gradient taken in). Exact equality, fixed before the
// first run: the split issues the same kernels on the same inputs, and each
// parameter's additions stay in microbatch order whether the weight passes run right
// after their input passes ("B0 W0 B1 W1") or after both ("B0 B1 W0 W1").
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

enum class Order { kWhole, kWeightEach, kWeightAfter };  // backward(); B0 W0 B1 W1; B0 B1 W0 W1

Config split_config(Config c) {
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  c.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
  return c;
}

struct Result {
  std::vector<std::vector<float>> grads;   // per stage
  std::vector<std::vector<float>> dinput;  // per microbatch: the last stage's input gradient (a cut only)
  double loss = 0;
};

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two microbatches through `stages` equal stages (1: the whole model), both forwarded
// into their own slot before the backwards (1F1B's overlap), then the backwards in
// `order`, the last stage first for each microbatch.
Result run(const Config& c, int stages, int threads, Order order) {
  std::vector<std::unique_ptr<kernels::cpu::CpuDevice>> devs;
  std::vector<std::unique_ptr<model::GptStage>> st;
  for (int k = 0; k < stages; ++k) {
    devs.push_back(std::make_unique<kernels::cpu::CpuDevice>(threads));
    const auto range = stages == 1 ? model::StageRange::whole(c) : model::StageRange::pipeline(c, k, stages);
    st.push_back(std::make_unique<model::GptStage>(c, range, *devs.back(), 2));
    jitter_parameters(*st.back(), 0.1, 31 + uint32_t(k));
    st.back()->zero_grads();
  }
  auto mbs = packed_batches();
  mbs[0].first_slot = 0;
  mbs[1].first_slot = mbs[0].batch;
  Result r;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < stages; ++k) {
      const float* in = k == 0 ? nullptr : st[size_t(k - 1)]->output(i);
      r.loss += st[size_t(k)]->forward(i, mbs[size_t(i)], in).loss_sum;
    }
  auto input_pass = [&](int i) {
    for (int k = stages - 1; k >= 0; --k) {
      const float* g = k == stages - 1 ? nullptr : st[size_t(k + 1)]->input_grad(i);
      if (order == Order::kWhole)
        st[size_t(k)]->backward(i, g);
      else
        st[size_t(k)]->backward_input(i, g);
    }
    if (stages > 1) {
      const int64_t n = st.back()->activation_rows(mbs[size_t(i)].batch, mbs[size_t(i)].seq) * c.model().width();
      r.dinput.push_back(to_host(*devs.back(), st.back()->input_grad(i), n));
    }
  };
  auto weight_pass = [&](int i) {
    if (order == Order::kWhole) return;
    for (int k = stages - 1; k >= 0; --k) st[size_t(k)]->backward_weight(i);
  };
  if (order == Order::kWeightAfter) {
    input_pass(0);
    input_pass(1);
    weight_pass(0);
    weight_pass(1);
  } else {
    input_pass(0);
    weight_pass(0);
    input_pass(1);
    weight_pass(1);
  }
  for (int k = 0; k < stages; ++k) r.grads.push_back(to_host(*devs[size_t(k)], st[size_t(k)]->grads(),
                                                             st[size_t(k)]->param_count()));
  return r;
}

void check_split_equals_whole(const Config& base) {
  const Config c = split_config(base);
  for (int stages : {1, 2})
    for (int threads : {1, 2}) {
      CAPTURE(stages);
      CAPTURE(threads);
      const Result whole = run(c, stages, threads, Order::kWhole);
      for (Order order : {Order::kWeightEach, Order::kWeightAfter}) {
        CAPTURE(order == Order::kWeightEach ? "B0 W0 B1 W1" : "B0 B1 W0 W1");
        const Result split = run(c, stages, threads, order);
        CHECK(split.loss == whole.loss);
        REQUIRE(split.grads.size() == whole.grads.size());
        for (size_t k = 0; k < whole.grads.size(); ++k) CHECK(same(split.grads[k], whole.grads[k]));
        REQUIRE(split.dinput.size() == whole.dinput.size());
        for (size_t i = 0; i < whole.dinput.size(); ++i) CHECK(same(split.dinput[i], whole.dinput[i]));
      }
    }
}

}  // namespace

TEST_CASE("split backward gives the bits of backward(): GPT-2, tied and untied head") {
  Config c = tiny_config();
  SUBCASE("tied") { check_split_equals_whole(c); }
  SUBCASE("untied") {
    c.mutable_model()->set_tied_embeddings(false);
    check_split_equals_whole(c);
  }
}

TEST_CASE("split backward gives the bits of backward(): Llama, tied and untied head") {
  SUBCASE("untied") { check_split_equals_whole(tiny_llama_config(2, false)); }
  SUBCASE("tied") { check_split_equals_whole(tiny_llama_config(2, true)); }
  SUBCASE("one kv head") { check_split_equals_whole(tiny_llama_config(1, false)); }
}

TEST_CASE("split backward keeps each linear's output gradient in the slot, counted as saved floats") {
  const Config whole_cfg = tiny_config();
  const Config split_cfg = split_config(whole_cfg);
  kernels::cpu::CpuDevice dev(1);
  model::GptStage whole(whole_cfg, model::StageRange::whole(whole_cfg), dev, 1);
  model::GptStage split(split_cfg, model::StageRange::whole(split_cfg), dev, 1);
  CHECK_FALSE(whole.split_backward());
  CHECK(split.split_backward());
  CHECK(whole.slot_deferred_floats() == 0);
  // tiny_config: BT = 2 x 16 = 32 tokens, D = 16, ffn 4D = 64, 2 layers. Per block:
  // attention c_proj's dout [BT, D] + dqkv [BT, 3D]; MLP c_proj's dout [BT, D] + dh
  // [BT, 4D]; the embedding's dout [BT, D] once.
  const int64_t BT = 32, D = 16;
  CHECK(split.slot_deferred_floats() == 2 * (BT * (D + 3 * D) + BT * (D + 4 * D)) + BT * D);
  CHECK(split.slot_saved_floats() == whole.slot_saved_floats() + split.slot_deferred_floats());
}

TEST_CASE("split backward: the passes out of turn are refused") {
  kernels::cpu::CpuDevice dev(1);
  const Config plain = tiny_config();
  model::GptStage whole(plain, model::StageRange::whole(plain), dev, 1);
  auto mbs = packed_batches();
  whole.forward(0, mbs[0]);
  CHECK_THROWS_WITH_AS(whole.backward_input(0), doctest::Contains("not built for the split backward"),
                       std::logic_error);
  const Config c = split_config(plain);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1);
  CHECK_THROWS_WITH_AS(stage.backward_weight(0), doctest::Contains("no backward_input waiting"), std::logic_error);
  stage.forward(0, mbs[0]);
  stage.backward_input(0);
  CHECK_THROWS_WITH_AS(stage.forward(0, mbs[1]), doctest::Contains("still holds what its backward_weight needs"),
                       std::logic_error);
  stage.backward_weight(0);
  CHECK_NOTHROW(stage.forward(0, mbs[1]));
  Config recompute = c;
  recompute.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
  CHECK_THROWS_WITH_AS(model::GptStage(recompute, model::StageRange::whole(recompute), dev, 1),
                       doctest::Contains("ZB_H1) needs model.recompute NONE"), std::invalid_argument);
}
