// The parameter registry (names, shapes, groups, layout) and deterministic init.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "config/derived.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "model/init.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("whole-model registry: Hugging Face names, shapes, one flat layout") {
  Config c = tiny_config();
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  CHECK(reg.total() == config::parameter_count(c));
  const auto& wte = reg.at("wte.weight");
  CHECK(wte.shape == std::vector<int64_t>{320, 16});
  CHECK(wte.valid_rows == 257);
  CHECK(wte.offset == 0);
  CHECK(reg.at("wpe.weight").shape == std::vector<int64_t>{32, 16});
  CHECK(reg.at("h.1.attn.c_attn.weight").shape == std::vector<int64_t>{16, 48});
  CHECK(reg.at("h.1.attn.c_attn.bias").shape == std::vector<int64_t>{48});
  CHECK(reg.at("h.0.mlp.c_fc.weight").shape == std::vector<int64_t>{16, 64});
  CHECK(reg.at("h.0.mlp.c_proj.weight").shape == std::vector<int64_t>{64, 16});
  CHECK(reg.at("ln_f.bias").shape == std::vector<int64_t>{16});
  CHECK_THROWS_WITH(reg.at("lm_head.weight"), "no parameter 'lm_head.weight' in the stage holding layers [0, 2)");
  // contiguous, in order, no gaps
  int64_t next = 0;
  for (const auto& t : reg.tensors()) {
    CHECK(t.offset == next);
    next += t.numel;
    CHECK(t.global_shape == t.shape);  // whole tensors today
  }
  CHECK(next == reg.total());
  CHECK(reg.tensors().size() == 2 + 2 * 12 + 2);
}

TEST_CASE("decay groups: 2-D weights decay, biases and norm parameters do not") {
  Config c = tiny_config();
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  const auto decay = reg.names(model::DecayGroup::kDecay);
  const auto none = reg.names(model::DecayGroup::kNoDecay);
  CHECK(decay.size() == 2 + 2 * 4);
  CHECK(none.size() == 2 * 8 + 2);
  for (const auto& t : reg.tensors()) CHECK((t.group == model::DecayGroup::kDecay) == (t.shape.size() == 2));
  CHECK(decay.front() == "wte.weight");
  CHECK(none.back() == "ln_f.bias");
  int64_t spans = 0;
  for (const auto& s : reg.decay_spans()) spans += s.end - s.begin;
  CHECK(spans == reg.total());
}

TEST_CASE("pipeline stages: embeddings first, head last, tied wte counted once") {
  Config c = tiny_config();
  c.mutable_model()->set_layers(4);
  const model::ParameterRegistry whole(c, model::StageRange::whole(c));
  int64_t counted = 0;
  std::set<std::string> names;
  for (int k = 0; k < 2; ++k) {
    const model::ParameterRegistry reg(c, model::StageRange::pipeline(c, k, 2));
    for (const auto& r : reg.norm_ranges()) counted += r.end - r.begin;
    for (const auto& t : reg.tensors()) names.insert(t.name);
    if (k == 0) {
      CHECK(reg.find("wpe.weight"));
      CHECK(reg.find("h.1.ln_1.weight"));
      CHECK_FALSE(reg.find("h.2.ln_1.weight"));
      CHECK_FALSE(reg.find("ln_f.weight"));
      CHECK(reg.at("wte.weight").counts_in_norm);
    } else {
      CHECK_FALSE(reg.find("wpe.weight"));
      CHECK(reg.find("h.2.ln_1.weight"));
      CHECK(reg.find("ln_f.weight"));
      CHECK_FALSE(reg.at("wte.weight").counts_in_norm);  // the head's copy
    }
  }
  CHECK(counted == whole.total());
  CHECK(names.size() == whole.tensors().size());
  CHECK_THROWS_WITH(model::StageRange::pipeline(c, 0, 3), "model.layers 4 does not divide into 3 pipeline stages");
}

TEST_CASE("initial weights depend only on (seed, name, global index): every cut starts equal") {
  Config c = tiny_config();
  c.mutable_model()->set_layers(4);
  kernels::cpu::CpuDevice dev(1);
  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  const auto w = to_host(dev, whole.params(), whole.param_count());
  for (int k = 0; k < 2; ++k) {
    model::GptStage stage(c, model::StageRange::pipeline(c, k, 2), dev, 1);
    const auto s = to_host(dev, stage.params(), stage.param_count());
    for (const auto& t : stage.registry().tensors()) {
      const auto& wt = whole.registry().at(t.name);
      CAPTURE(t.name);
      CHECK(std::memcmp(&s[size_t(t.offset)], &w[size_t(wt.offset)], size_t(t.numel) * sizeof(float)) == 0);
    }
  }
  // GPT-2 rules: normal(0, std) weights, std / sqrt(2 L) for residual projections,
  // zero biases and padding rows, unit norm scales.
  const auto& reg = whole.registry();
  auto stats = [&](const std::string& name, int64_t rows) {
    const auto& t = reg.at(name);
    const int64_t n = rows * (t.shape.size() == 2 ? t.shape[1] : 1);
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += w[size_t(t.offset + i)];
      ss += double(w[size_t(t.offset + i)]) * w[size_t(t.offset + i)];
    }
    return std::pair<double, double>{s / double(n), std::sqrt(ss / double(n))};
  };
  const auto [m0, sd0] = stats("wte.weight", 257);
  CHECK(std::fabs(m0) < 0.002);
  CHECK(sd0 == doctest::Approx(0.02).epsilon(0.05));
  const auto [m1, sd1] = stats("h.3.mlp.c_proj.weight", 64);
  CHECK(sd1 == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.1));
  (void)m1;
  CHECK(stats("h.0.attn.c_attn.bias", 48).second == 0.0);
  CHECK(stats("h.0.ln_1.weight", 16).first == 1.0);
  const auto& wte = reg.at("wte.weight");
  for (int64_t i = 257 * 16; i < wte.numel; ++i) REQUIRE(w[size_t(wte.offset + i)] == 0.0f);

  // The generator itself: fixed values for fixed inputs, sensitive to every key part.
  const double z = model::init_normal(1234, "wte.weight", 0);
  CHECK(z == model::init_normal(1234, "wte.weight", 0));
  CHECK(z != model::init_normal(1235, "wte.weight", 0));
  CHECK(z != model::init_normal(1234, "wpe.weight", 0));
  CHECK(z != model::init_normal(1234, "wte.weight", 1));
  // Philox4x32-10 known-answer vector (Random123 kat_vectors: counter 0, key 0).
  const auto kat = model::philox4x32_10({0, 0, 0, 0}, {0, 0});
  CHECK(kat == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
}
