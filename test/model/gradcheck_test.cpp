// Finite-difference check of every parameter gradient and of the input paths, on a
// tiny model with packed documents and padding. The numerical derivative comes from
// a double-precision forward written independently from the spec
// (reference_forward.cpp), so the check covers the fp32 forward too: the fp32 loss
// must match the double loss before any gradient is compared.
//
// Tolerance, fixed before the first run: |g_model - g_fd| <= 1e-3 |g_fd| + 1e-4 G,
// G = the largest |gradient| in that tensor. Central differences with h = 1e-4 in
// double have error ~1e-8 relative; the fp32 backward sums at most a few hundred
// terms (unit roundoff 6e-8, so ~1e-5 relative to G). A wrong or missing term
// shows up at the size of the gradient itself, far above this bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/reference_forward.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kH = 1e-4;
constexpr double kRel = 1e-3, kAbsOfMax = 1e-4;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Elements of tensor t to check: a few random ones and the largest gradient.
std::vector<int64_t> pick(const model::ParamTensor& t, const std::vector<float>& g, std::mt19937& rng) {
  std::vector<int64_t> out;
  std::uniform_int_distribution<int64_t> any(0, t.numel - 1);
  const int64_t row_len = t.shape.size() == 2 ? t.shape[1] : 1;
  const int64_t valid = t.valid_rows * row_len;
  std::uniform_int_distribution<int64_t> real(0, valid - 1);
  for (int k = 0; k < 4; ++k) out.push_back(real(rng));
  int64_t best = 0;
  for (int64_t i = 0; i < t.numel; ++i)
    if (std::fabs(g[size_t(t.offset + i)]) > std::fabs(g[size_t(t.offset + best)])) best = i;
  out.push_back(best);
  (void)any;
  return out;
}

// With dropout the microbatches are training ones (first_slot set), and the reference
// drops the same elements (reference_forward.h), so the masks are part of the function
// whose gradient is checked.
void check_whole_model(bool dropout) {
  Config c = tiny_config();
  c.mutable_model()->set_init_std(0.3f);  // large enough that every nonlinearity is exercised
  if (dropout) {
    c.mutable_model()->set_hidden_dropout(0.2f);
    c.mutable_model()->set_attention_dropout(0.2f);
  }
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1);
  jitter_parameters(stage, 0.1, 11);
  auto mbs = packed_batches();
  REQUIRE(mbs[0].padding_tokens > 0);
  if (dropout) {
    mbs[0].first_slot = 0;
    mbs[1].first_slot = mbs[0].batch;
  }

  const double loss_sum = accumulate_gradients(stage, mbs);
  const auto params = to_host(dev, stage.params(), stage.param_count());
  const auto grads = to_host(dev, stage.grads(), stage.param_count());
  std::vector<double> p = to_double(params);
  const auto& reg = stage.registry();

  const double ref = reference_loss(c, reg, p, mbs);
  const double mine = loss_sum / double(mbs[0].global_loss_tokens);
  CHECK(std::fabs(mine - ref) <= 1e-5 * std::fabs(ref));

  std::mt19937 rng(5);
  int checked = 0;
  for (const auto& t : reg.tensors()) {
    double gmax = 0;
    for (int64_t i = 0; i < t.numel; ++i) gmax = std::max(gmax, double(std::fabs(grads[size_t(t.offset + i)])));
    CAPTURE(t.name);
    CHECK(gmax > 0);
    std::vector<int64_t> elems = pick(t, grads, rng);
    if (t.name == "wte.weight") {
      // rows of input tokens (embedding + head paths), a row no token uses (head path only)
      elems.push_back(int64_t(mbs[0].tokens[3]) * t.shape[1] + 5);
      elems.push_back(int64_t(kEod) * t.shape[1] + 2);
      for (int32_t r = 0; r < 256; ++r) {
        bool used = false;
        for (const auto& mb : mbs)
          for (int32_t tok : mb.tokens) used |= tok == r;
        if (!used) {
          elems.push_back(int64_t(r) * t.shape[1] + 7);
          break;
        }
      }
    }
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
  CHECK(checked >= 5 * int(reg.tensors().size()));

  // Vocabulary padding rows get exactly zero gradient (never predicted, never input).
  const auto& wte = reg.at("wte.weight");
  for (int64_t i = wte.valid_rows * wte.shape[1]; i < wte.numel; ++i) REQUIRE(grads[size_t(wte.offset + i)] == 0.0f);
}

}  // namespace

TEST_CASE("finite differences match every parameter gradient of the whole model") { check_whole_model(false); }

TEST_CASE("finite differences match every parameter gradient with hidden and attention dropout") {
  check_whole_model(true);
}

TEST_CASE("finite differences match the input gradient of a later pipeline stage") {
  Config c = tiny_config();
  c.mutable_model()->set_init_std(0.3f);
  kernels::cpu::CpuDevice dev(1);
  model::GptStage stage(c, {1, 2}, dev, 2);
  jitter_parameters(stage, 0.1, 12);
  const auto mbs = packed_batches();
  const int BT = mbs[0].batch * mbs[0].seq, D = c.model().width();

  std::mt19937 rng(9);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<std::vector<double>> inputs(2, std::vector<double>(size_t(BT) * D));
  std::vector<std::vector<float>> inputs_f(2, std::vector<float>(size_t(BT) * D));
  for (int k = 0; k < 2; ++k)
    for (size_t i = 0; i < inputs[size_t(k)].size(); ++i) {
      inputs_f[size_t(k)][i] = float(nd(rng));
      inputs[size_t(k)][i] = inputs_f[size_t(k)][i];
    }
  stage.zero_grads();
  for (int k = 0; k < 2; ++k) stage.forward(k, mbs[size_t(k)], inputs_f[size_t(k)].data());
  std::vector<std::vector<float>> dinput;
  for (int k = 0; k < 2; ++k) {
    stage.backward(k);
    dinput.push_back(to_host(dev, stage.input_grad(k), int64_t(BT) * D));
  }
  const std::vector<double> p = to_double(to_host(dev, stage.params(), stage.param_count()));
  const auto& reg = stage.registry();
  for (int k = 0; k < 2; ++k) {
    double gmax = 0;
    for (float g : dinput[size_t(k)]) gmax = std::max(gmax, double(std::fabs(g)));
    CHECK(gmax > 0);
    std::uniform_int_distribution<int> any(0, BT * D - 1);
    for (int trial = 0; trial < 12; ++trial) {
      const int i = any(rng);
      auto x = inputs;
      x[size_t(k)][size_t(i)] += kH;
      const double up = reference_loss(c, reg, p, mbs, &x);
      x[size_t(k)][size_t(i)] -= 2 * kH;
      const double down = reference_loss(c, reg, p, mbs, &x);
      const double fd = (up - down) / (2 * kH);
      CAPTURE(k);
      CAPTURE(i);
      CHECK(std::fabs(dinput[size_t(k)][size_t(i)] - fd) <= kRel * std::fabs(fd) + kAbsOfMax * gmax);
      // A padding position's input never influences the loss.
      if (mbs[size_t(k)].segments[size_t(i / D)] == kPadSegment) CHECK(dinput[size_t(k)][size_t(i)] == 0.0f);
    }
  }
}
