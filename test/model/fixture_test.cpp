// The inspectable update (docs/acceptance.md, part "First"): one update of a tiny GPT-2 on
// 24 packed samples (a long document across windows, two short documents in one
// window, padding) against tools/fixtures/inspect_update, which
// tools/reference_update.py computed independently with PyTorch in float64.
// The C++ side runs it as 6 microbatches of 4 samples (the reference as one batch),
// so the fixture also checks gradient accumulation and the loss normalisation.
//
// Tolerances, fixed before the first comparison (fp32 here vs float64 there, same
// arithmetic; fp32 relative error ~1e-6):
//   loss, grad norm, clip factor: relative 1e-5;  lr: relative 1e-12; tokens: exact
//   gradients and m: per tensor max |diff| <= 1e-4 * max |reference|;  v: 2e-4 (squares)
//   updated parameters: 1e-6 absolute (the update itself is lr = 5e-4 per element,
//   decay lr * wd * p ~ 5e-6, both far above it)
// One class of elements is excluded from the parameter comparison with the
// reference, for a reason found on the first run (1.5e-6 > 1e-6 on c_attn.bias):
// AdamW's first step moves p by lr * g / (|g| + eps), which is ill-conditioned where
// |g| is near eps = 1e-8. The attention key bias has an exactly zero gradient in
// exact arithmetic (softmax ignores a shift common to all keys; the float64
// reference gives ~1e-19), while fp32 leaves rounding noise ~1e-10 that AdamW turns
// into a visible step. So the key-bias elements (c_attn.bias columns [D, 2D)) are
// checked to have a reference gradient below 1e-15, and their update is checked
// against the AdamW formula applied in double to this run's own m and v (same 1e-6
// bound); every other element is compared with the reference.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/text_format.h"
#include "kernels/cpu/cpu_device.h"
#include "model/named_tensors.h"
#include "model/safetensors.h"
#include "engine/reference_trainer.h"
#include "test/support/scratch_dir.h"

using namespace troupe;

namespace {

const std::string kDir = std::string(TROUPE_SOURCE_DIR) + "/tools/fixtures/inspect_update/";

std::vector<data::Microbatch> fixture_microbatches(const model::StFile& fx, int mbs, int T) {
  const auto tokens = fx.at("batch.tokens").as_i32(), targets = fx.at("batch.targets").as_i32();
  const auto positions = fx.at("batch.positions").as_i32(), segments = fx.at("batch.segments").as_i32();
  const auto mask = fx.at("batch.loss_mask").as_f32();
  const int S = int(fx.at("batch.tokens").shape[0]);
  std::vector<data::Microbatch> out;
  for (int first = 0; first < S; first += mbs) {
    data::Microbatch mb;
    mb.batch = mbs;
    mb.seq = T;
    const size_t b = size_t(first) * T, e = size_t(first + mbs) * T;
    mb.tokens.assign(tokens.begin() + long(b), tokens.begin() + long(e));
    mb.targets.assign(targets.begin() + long(b), targets.begin() + long(e));
    mb.positions.assign(positions.begin() + long(b), positions.begin() + long(e));
    mb.segments.assign(segments.begin() + long(b), segments.begin() + long(e));
    mb.loss_mask.assign(mask.begin() + long(b), mask.begin() + long(e));
    for (float m : mb.loss_mask) mb.loss_tokens += m != 0.0f;
    for (int r = 0; r < mbs; ++r) mb.sample_ids.push_back(first + r);
    out.push_back(std::move(mb));
  }
  int64_t total = 0;
  for (const auto& mb : out) total += mb.loss_tokens;
  for (auto& mb : out) mb.global_loss_tokens = total;
  return out;
}

// max |have - want| / max |want| over one tensor.
double relative_to_max(const std::vector<float>& have, const std::vector<float>& want) {
  double d = 0, m = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d = std::max(d, std::fabs(double(have[i]) - want[i]));
    m = std::max(m, std::fabs(double(want[i])));
  }
  return m > 0 ? d / m : d;
}

}  // namespace

TEST_CASE("one inspectable update matches the independent PyTorch reference") {
  const Config cfg = config::load_config_file(kDir + "config.textproto");
  const model::StFile fx = model::read_safetensors(kDir + "fixture.safetensors");
  nlohmann::json expected;
  std::ifstream(kDir + "expected.json") >> expected;

  kernels::cpu::CpuDevice dev(2);
  engine::ReferenceTrainer trainer(cfg, dev);
  model::GptStage& m = trainer.model();
  std::vector<float> host(static_cast<size_t>(m.param_count()));
  model::import_tensors(m.registry(), fx, host.data(), "init.");
  dev.copy_from_host(m.params(), host.data(), host.size() * sizeof(float));

  const auto mbs = fixture_microbatches(fx, cfg.batch().micro_batch_size(), cfg.batch().seq_length());
  REQUIRE(mbs.size() == 6);
  const engine::StepReport r = trainer.step(mbs);

  CHECK(r.loss_tokens == expected["loss_tokens"].get<int64_t>());
  CHECK(r.samples == 24);
  CHECK(std::fabs(r.loss - expected["loss"].get<double>()) <= 1e-5 * expected["loss"].get<double>());
  CHECK(std::fabs(r.grad_norm - expected["grad_norm"].get<double>()) <= 1e-5 * expected["grad_norm"].get<double>());
  CHECK(r.clipped == expected["clipped"].get<bool>());
  CHECK(std::fabs(r.clip_factor - expected["clip_factor"].get<double>()) <= 1e-5 * expected["clip_factor"].get<double>());
  CHECK(std::fabs(r.lr - expected["lr"].get<double>()) <= 1e-12 * expected["lr"].get<double>());
  CHECK_FALSE(r.skipped);

  const int64_t n = m.param_count();
  const size_t un = static_cast<size_t>(n);
  std::vector<float> grads(un), params(un), mom(un), vel(un);
  dev.copy_to_host(grads.data(), m.grads(), size_t(n) * 4);
  dev.copy_to_host(params.data(), m.params(), size_t(n) * 4);
  dev.copy_to_host(mom.data(), trainer.optimizer().m(), size_t(n) * 4);
  dev.copy_to_host(vel.data(), trainer.optimizer().v(), size_t(n) * 4);
  const auto g = model::export_tensors(m.registry(), grads.data());
  const auto p = model::export_tensors(m.registry(), params.data());
  const auto mo = model::export_tensors(m.registry(), mom.data());
  const auto ve = model::export_tensors(m.registry(), vel.data());
  const int D = cfg.model().width();
  const double lr = r.lr, b1 = cfg.optimizer().beta1(), b2 = cfg.optimizer().beta2();
  const double eps = cfg.optimizer().eps(), wd = cfg.optimizer().weight_decay();
  int key_bias_elements = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const std::string& name = g[i].name;
    CAPTURE(name);
    CHECK(relative_to_max(g[i].as_f32(), fx.at("grad." + name).as_f32()) <= 1e-4);
    const auto have = p[i].as_f32(), want = fx.at("param." + name).as_f32(), gref = fx.at("grad." + name).as_f32();
    const auto init = fx.at("init." + name).as_f32(), mm = mo[i].as_f32(), vv = ve[i].as_f32();
    const std::string tail = ".attn.c_attn.bias";
    const bool qkv_bias = name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    for (size_t k = 0; k < want.size(); ++k) {
      if (!(qkv_bias && int(k) >= D && int(k) < 2 * D)) {
        REQUIRE(std::fabs(double(have[k]) - want[k]) <= 1e-6);
        continue;
      }
      ++key_bias_elements;
      CHECK(std::fabs(gref[k]) < 1e-15);
      const double decay = g[i].shape.size() == 2 ? wd : 0.0;
      const double u = (mm[k] / (1 - b1)) / (std::sqrt(vv[k] / (1 - b2)) + eps);
      CHECK(std::fabs(have[k] - (init[k] * (1 - lr * decay) - lr * u)) <= 1e-6);
    }
    CHECK(relative_to_max(mo[i].as_f32(), fx.at("exp_avg." + name).as_f32()) <= 1e-4);
    CHECK(relative_to_max(ve[i].as_f32(), fx.at("exp_avg_sq." + name).as_f32()) <= 2e-4);
  }
  CHECK(g.size() == 2 + 2 * 12 + 2);
  CHECK(key_bias_elements == cfg.model().layers() * D);

  // The selected values recorded for a human reader, through the same bounds.
  const auto& sel = expected["selected"];
  const double gmax_qkv = [&] {
    double mx = 0;
    for (float x : fx.at("grad.h.0.attn.c_attn.weight").as_f32()) mx = std::max(mx, double(std::fabs(x)));
    return mx;
  }();
  CHECK(std::fabs(grads[size_t(m.registry().at("h.0.attn.c_attn.weight").offset)] - sel["grad_h0_c_attn_w_0_0"].get<double>()) <= 1e-4 * gmax_qkv);
  CHECK(std::fabs(params[size_t(m.registry().at("wte.weight").offset + 84 * D + 3)] - sel["param_wte_84_3"].get<double>()) <= 1e-6);
  CHECK(std::fabs(params[size_t(m.registry().at("h.1.ln_2.bias").offset + 5)] - sel["param_h1_ln_2_bias_5"].get<double>()) <= 1e-6);
}

TEST_CASE("safetensors round trip and import errors name the file and tensor") {
  // In a fresh temporary directory, never the working directory.
  const auto dir = testing::fresh_temp_dir("fixture-test");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "roundtrip.safetensors").string();
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> i = {1, 2, 3};
  model::write_safetensors(path, {model::StTensor::f32("a", {2, 3}, f.data()), model::StTensor::i32("b", {3}, i.data())},
                           {{"note", "x"}});
  const auto file = model::read_safetensors(path);
  CHECK(file.metadata.at("note") == "x");
  CHECK(file.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK(file.at("a").as_f32() == f);
  CHECK(file.at("b").as_i32() == i);
  CHECK_THROWS_WITH(file.at("b").as_f32(), "tensor b is I32, not F32");
  CHECK_THROWS_WITH(file.at("c"), (path + ": no tensor 'c'").c_str());

  const Config cfg = config::load_config_file(kDir + "config.textproto");
  const model::ParameterRegistry reg(cfg, model::StageRange::whole(cfg));
  std::vector<float> host(static_cast<size_t>(reg.total()));
  CHECK_THROWS_WITH(model::import_tensors(reg, file, host.data()),
                    doctest::Contains(doctest::String((path + ": cannot load the layers [0, 2) weights: missing wte.weight; missing wpe.weight").c_str())));
  const std::string truncated = (dir / "truncated.safetensors").string();
  std::ofstream(truncated, std::ios::binary).write("\x10\x00\x00", 3);
  CHECK_THROWS_WITH(model::read_safetensors(truncated),
                    (truncated + ": file of 3 bytes is too short for a safetensors header").c_str());
  std::filesystem::remove_all(dir);
}
