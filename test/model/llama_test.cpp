// The Llama family on one device: its registry (Hugging Face names, shapes, decay
// groups), its parameter count, Llama 3's rotary frequency scaling, and every
// parameter gradient of the fp32 model against central differences of the
// double-precision reference (llama_reference.cpp), for grouped-query, multi-query
// and multi-head attention, tied and untied heads, and heads of model.head_dim wider
// and narrower than width / heads.
//
// Tolerances, fixed before the first run (those of gradcheck_test.cpp, whose
// reasoning holds here: the same sizes of sums in fp32): the loss within 1e-5
// relative of the double loss; |g_model - g_fd| <= 1e-3 |g_fd| + 1e-4 G, G the
// largest |gradient| of that tensor.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "config/derived.h"
#include "config/text_format.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "model/layers/rope.h"
#include "test/model/reference_forward.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kH = 1e-4;
constexpr double kRel = 1e-3, kAbsOfMax = 1e-4, kLossRel = 1e-5;

// With the config's dropout on, the microbatches are training ones (first_slot set) and
// the reference drops the same elements.
void check_gradients(const Config& c) {
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1);
  jitter_parameters(stage, 0.1, 11);
  auto mbs = packed_batches();
  mbs[0].first_slot = 0;
  mbs[1].first_slot = mbs[0].batch;
  const double loss_sum = accumulate_gradients(stage, mbs);
  const auto params = to_host(dev, stage.params(), stage.param_count());
  const auto grads = to_host(dev, stage.grads(), stage.param_count());
  std::vector<double> p(params.begin(), params.end());
  const auto& reg = stage.registry();
  const double ref = reference_loss(c, reg, p, mbs);
  CHECK(std::fabs(loss_sum / double(mbs[0].global_loss_tokens) - ref) <= kLossRel * std::fabs(ref));

  std::mt19937 rng(5);
  int checked = 0;
  for (const auto& t : reg.tensors()) {
    double gmax = 0;
    int64_t best = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      const double g = std::fabs(grads[size_t(t.offset + i)]);
      if (g > gmax) gmax = g, best = i;
    }
    CAPTURE(t.name);
    CHECK(gmax > 0);
    const int64_t row_len = t.shape.size() == 2 ? t.shape[1] : 1;
    std::uniform_int_distribution<int64_t> real(0, t.valid_rows * row_len - 1);
    std::vector<int64_t> elems = {real(rng), real(rng), real(rng), best};
    for (int64_t e : elems) {
      const size_t idx = size_t(t.offset + e);
      const double fd = central_difference(c, reg, p, mbs, idx, kH);
      CAPTURE(e);
      CAPTURE(fd);
      CAPTURE(grads[idx]);
      CHECK(std::fabs(grads[idx] - fd) <= kRel * std::fabs(fd) + kAbsOfMax * gmax);
      ++checked;
    }
  }
  CHECK(checked == 4 * int(reg.tensors().size()));
}

// Stages [0, 1) and [1, 2) of c chained by hand on mb against `whole` (forward and
// backward of slot 0): the same loss and every gradient the same bits. Returns the loss.
double check_cut_equals_whole(const Config& c, kernels::Device& dev, model::GptStage& whole,
                              const data::Microbatch& mb) {
  model::GptStage first(c, model::StageRange{0, 1}, dev, 1);
  model::GptStage last(c, model::StageRange{1, 2}, dev, 1);
  const double loss = whole.forward(0, mb).loss_sum;
  whole.backward(0);
  first.forward(0, mb);
  const double cut = last.forward(0, mb, first.output(0)).loss_sum;
  last.backward(0);
  first.backward(0, last.input_grad(0));
  CHECK(loss == cut);
  const auto wg = to_host(dev, whole.grads(), whole.param_count());
  for (model::GptStage* s : {&first, &last}) {
    const auto g = to_host(dev, s->grads(), s->param_count());
    for (const auto& t : s->registry().tensors()) {
      CAPTURE(t.name);
      const auto& w = whole.registry().at(t.name);
      CHECK(std::equal(g.begin() + t.offset, g.begin() + t.offset + t.numel, wg.begin() + w.offset));
    }
  }
  return loss;
}

}  // namespace

TEST_CASE("a Llama registry holds Hugging Face's names and shapes") {
  const Config c = tiny_llama_config();
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  using S = std::vector<int64_t>;
  CHECK(reg.at("model.embed_tokens.weight").shape == S{320, 16});
  CHECK(reg.at("model.layers.1.input_layernorm.weight").shape == S{16});
  CHECK(reg.at("model.layers.1.self_attn.q_proj.weight").shape == S{16, 16});
  CHECK(reg.at("model.layers.1.self_attn.k_proj.weight").shape == S{8, 16});  // 2 kv heads of 4
  CHECK(reg.at("model.layers.1.self_attn.v_proj.weight").shape == S{8, 16});
  CHECK(reg.at("model.layers.1.self_attn.o_proj.weight").shape == S{16, 16});
  CHECK(reg.at("model.layers.0.post_attention_layernorm.weight").shape == S{16});
  CHECK(reg.at("model.layers.0.mlp.gate_proj.weight").shape == S{24, 16});
  CHECK(reg.at("model.layers.0.mlp.up_proj.weight").shape == S{24, 16});
  CHECK(reg.at("model.layers.0.mlp.down_proj.weight").shape == S{16, 24});
  CHECK(reg.at("model.norm.weight").shape == S{16});
  CHECK(reg.at("lm_head.weight").shape == S{320, 16});
  CHECK(reg.at("lm_head.weight").valid_rows == 257);
  CHECK_FALSE(reg.find("wpe.weight"));
  CHECK_FALSE(reg.find("model.layers.0.self_attn.q_proj.bias"));
  // 2-D weights decay, norms do not.
  CHECK(reg.names(model::DecayGroup::kNoDecay) ==
        std::vector<std::string>{"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                                 "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                                 "model.norm.weight"});
  CHECK(reg.total() == config::parameter_count(c));
  CHECK(reg.head_offset() == reg.at("lm_head.weight").offset);
  // Tied: no lm_head, the head reads embed_tokens.
  const Config tied = tiny_llama_config(2, true);
  const model::ParameterRegistry treg(tied, model::StageRange::whole(tied));
  CHECK_FALSE(treg.find("lm_head.weight"));
  CHECK(treg.head_offset() == treg.at("model.embed_tokens.weight").offset);
  CHECK(treg.total() == config::parameter_count(tied));
}

TEST_CASE("a Llama with model.head_dim holds q, k, v and o projections of heads x head_dim") {
  // width 16, 4 heads of 6 (not 16 / 4 = 4), 2 kv heads: the attention is 24 wide.
  const Config c = tiny_llama_head_dim_config(6);
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  using S = std::vector<int64_t>;
  CHECK(reg.at("model.layers.0.self_attn.q_proj.weight").shape == S{24, 16});
  CHECK(reg.at("model.layers.0.self_attn.k_proj.weight").shape == S{12, 16});
  CHECK(reg.at("model.layers.0.self_attn.v_proj.weight").shape == S{12, 16});
  CHECK(reg.at("model.layers.0.self_attn.o_proj.weight").shape == S{16, 24});
  CHECK(reg.at("model.layers.0.mlp.gate_proj.weight").shape == S{24, 16});
  CHECK(reg.total() == config::parameter_count(c));
  // embed 320 x 16, lm_head 320 x 16, per layer q 384 + k, v 192 each + o 384 + MLP 3 x 384 + 2 norms of 16, final norm.
  CHECK(config::parameter_count(c) == 2 * 320 * 16 + 2 * (384 + 2 * 192 + 384 + 3 * 384 + 32) + 16);
  // head_dim 0 is width / heads: the same registry as tiny_llama_config's, name by name.
  const Config plain = tiny_llama_head_dim_config(0);
  const Config usual = tiny_llama_head_dim_config(4);
  const model::ParameterRegistry a(plain, model::StageRange::whole(plain)), b(usual, model::StageRange::whole(usual));
  REQUIRE(a.tensors().size() == b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    CHECK(a.tensors()[i].name == b.tensors()[i].name);
    CHECK(a.tensors()[i].shape == b.tensors()[i].shape);
    CHECK(a.tensors()[i].offset == b.tensors()[i].offset);
  }
}

TEST_CASE("the shipped Llama 3 8B config has 8,030,261,248 parameters") {
  const Config c = config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/llama3-8b.textproto");
  CHECK(config::parameter_count(c) == 8'030'261'248);
}

TEST_CASE("Llama 3's rotary scaling keeps short wavelengths, divides long ones, blends between") {
  model::layers::RopeConfig r{128, 16, 500000, 8, 1, 4, 8192};
  const auto scaled = model::layers::rope_frequencies(r);
  r.factor = 0;
  const auto plain = model::layers::rope_frequencies(r);
  REQUIRE(scaled.size() == 64);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    CHECK(plain[i] == doctest::Approx(std::pow(500000.0, -2.0 * double(i) / 128)).epsilon(1e-12));
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 8192.0 / 4) {
      CHECK(scaled[i] == plain[i]);
      ++kept;
    } else if (wavelength > 8192.0) {
      CHECK(scaled[i] == doctest::Approx(plain[i] / 8).epsilon(1e-12));
      ++divided;
    } else {
      const double s = (8192.0 / wavelength - 1) / (4 - 1);
      CHECK(scaled[i] == doctest::Approx((1 - s) * plain[i] / 8 + s * plain[i]).epsilon(1e-12));
      CHECK(scaled[i] < plain[i]);
      CHECK(scaled[i] > plain[i] / 8);
      ++blended;
    }
  }
  // Llama 3.1's 128-wide heads have all three bands.
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE("finite differences match every gradient of a grouped-query Llama (untied head)") {
  check_gradients(tiny_llama_config(2, false));
}

TEST_CASE("finite differences match every gradient of a multi-query Llama with a tied head") {
  check_gradients(tiny_llama_config(1, true));
}

TEST_CASE("finite differences match every gradient of a multi-head Llama with scaled rotary positions") {
  Config c = tiny_llama_config(4, false);
  auto* r = c.mutable_model()->mutable_rope_scaling();
  r->set_factor(4);
  r->set_low_freq_factor(1);
  r->set_high_freq_factor(4);
  r->set_original_max_positions(16);
  check_gradients(c);
}

TEST_CASE("finite differences match every gradient of a Llama whose heads are wider than width / heads") {
  // 4 heads of 6 over width 16: q | k | v is 48 wide and the attention output 24, wider
  // than the model (the output gradient then lives beside dqkv in the backward scratch).
  check_gradients(tiny_llama_head_dim_config(6));
}

TEST_CASE("finite differences match every gradient of a Llama of width 64 with 4 heads of 24 sharing 2 kv heads") {
  // The attention 96 wide over a model of 64: q_proj [96, 64], k_proj and v_proj [48, 64].
  Config c = tiny_llama_head_dim_config(24);
  c.mutable_model()->set_width(64);
  check_gradients(c);
}

TEST_CASE("finite differences match every gradient of a multi-query Llama with narrow heads and a tied head") {
  // 4 heads of 2 over width 16: the attention is 8 wide, half the model.
  check_gradients(tiny_llama_head_dim_config(2, 1, true));
}

TEST_CASE("finite differences match every gradient of a Llama with wide heads under selective recomputation") {
  Config c = tiny_llama_head_dim_config(6);
  c.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
  check_gradients(c);
}

TEST_CASE("Llama stages [0,1) [1,2) chained by hand equal the whole model bitwise") {
  const Config c = tiny_llama_config();
  kernels::cpu::CpuDevice dev(2);
  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  check_cut_equals_whole(c, dev, whole, packed_batches()[0]);
}

TEST_CASE("stages of a Llama with model.head_dim chained by hand equal the whole model bitwise") {
  const Config c = tiny_llama_head_dim_config(6);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  check_cut_equals_whole(c, dev, whole, packed_batches()[0]);
}

TEST_CASE("finite differences match every gradient of a grouped-query Llama with hidden and attention dropout") {
  Config c = tiny_llama_config();
  c.mutable_model()->set_hidden_dropout(0.2f);
  c.mutable_model()->set_attention_dropout(0.2f);
  check_gradients(c);
}

TEST_CASE("with dropout, Llama stages chained by hand equal the whole model bitwise; evaluation has no dropout") {
  // The masks are keyed by the global layer index and the sample slot, so a stage cut
  // draws what the whole model draws; a microbatch that is not a training one
  // (first_slot -1, as evaluation's) runs exactly as without dropout.
  Config c = tiny_llama_config();
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  auto mb = packed_batches()[0];
  mb.first_slot = 10;
  const double loss = check_cut_equals_whole(c, dev, whole, mb);

  // Evaluation: the same weights without dropout give the same bits.
  Config plain = c;
  plain.mutable_model()->set_hidden_dropout(0);
  plain.mutable_model()->set_attention_dropout(0);
  model::GptStage undropped(plain, model::StageRange::whole(plain), dev, 1);
  auto eval = mb;
  eval.first_slot = -1;
  const double eval_loss = whole.forward(0, eval).loss_sum;
  CHECK(eval_loss == undropped.forward(0, eval).loss_sum);
  CHECK(eval_loss != loss);  // the training forward did drop
  // Another slot draws another mask.
  auto later = mb;
  later.first_slot = 11;
  CHECK(whole.forward(0, later).loss_sum != loss);
}
