// Accumulation parity (docs/numerics.md, "Loss of a step"; docs/acceptance.md, part
// "First"): one global batch as one microbatch, or
// split into microbatches with unequal loss-bearing token counts, gives the same
// loss and gradients; averaging microbatch means does not.
//
// Tolerance, fixed before the first run: per tensor, max |g_split - g_whole| <=
// 1e-5 * max |g_whole|; loss relative 1e-6. Splitting only regroups fp32 sums over
// at most 64 rows (weight gradients) and the order of double sums (loss), which
// moves results by ~1e-7 relative; the mean-of-means error is a weighting error of
// order (tokens_i / mean tokens - 1), i.e. tens of percent here.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kGradTol = 1e-5, kLossTol = 1e-6;

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result accumulate(model::GptStage& stage, const std::vector<data::Microbatch>& mbs) {
  stage.zero_grads();
  double sum = 0;
  int64_t tokens = 0;
  for (const auto& mb : mbs) {
    const auto l = stage.forward(0, mb);
    stage.backward(0);
    sum += l.loss_sum;
    tokens += l.loss_tokens;
  }
  (void)tokens;
  return {sum / double(mbs[0].global_loss_tokens), to_host(stage.device(), stage.grads(), stage.param_count())};
}

// Largest per-tensor deviation, relative to that tensor's largest gradient.
double worst_relative(const model::ParameterRegistry& reg, const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (const auto& t : reg.tensors()) {
    double gmax = 0, d = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      gmax = std::max(gmax, double(std::fabs(b[size_t(t.offset + i)])));
      d = std::max(d, double(std::fabs(a[size_t(t.offset + i)] - b[size_t(t.offset + i)])));
    }
    if (gmax > 0) worst = std::max(worst, d / gmax);
  }
  return worst;
}

std::vector<Row> rows() {
  return {Row{{doc_tokens(3, 1), doc_tokens(4, 2)}},  // two short documents + padding: 3 + 4 loss tokens
          Row{{doc_tokens(50, 3)}},                   // a long document: 16
          Row{{doc_tokens(1, 4)}},                    // one token + EOD + padding: 1
          Row{{doc_tokens(9, 5), doc_tokens(9, 6)}}}; // 9 + 6 = 15
}

}  // namespace

TEST_CASE("one microbatch or several of unequal token counts: same loss and gradients") {
  Config c = tiny_config();
  c.mutable_model()->set_init_std(0.2f);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1, {4, 16});
  const auto r = rows();
  std::vector<data::Microbatch> whole = {pack_rows(r, 16)};
  std::vector<data::Microbatch> ones = {pack_rows({r[0]}, 16), pack_rows({r[1]}, 16), pack_rows({r[2]}, 16), pack_rows({r[3]}, 16)};
  std::vector<data::Microbatch> uneven = {pack_rows({r[0], r[1], r[2]}, 16), pack_rows({r[3]}, 16)};
  set_global_tokens(whole);
  set_global_tokens(ones);
  set_global_tokens(uneven);
  REQUIRE(whole[0].loss_tokens == 39);
  REQUIRE(ones[0].loss_tokens != ones[1].loss_tokens);

  const Result a = accumulate(stage, whole), b = accumulate(stage, ones), u = accumulate(stage, uneven);
  CHECK(std::fabs(b.loss - a.loss) <= kLossTol * a.loss);
  CHECK(std::fabs(u.loss - a.loss) <= kLossTol * a.loss);
  CHECK(worst_relative(stage.registry(), b.grads, a.grads) <= kGradTol);
  CHECK(worst_relative(stage.registry(), u.grads, a.grads) <= kGradTol);

  // Averaging microbatch means instead: each microbatch normalised by its own count,
  // then divided by the number of microbatches. Seeding backward with
  // global_loss_tokens = own tokens x 4 is exactly that. It must fail the same check.
  std::vector<data::Microbatch> mean_of_means = ones;
  double mm_loss = 0;
  for (auto& mb : mean_of_means) mb.global_loss_tokens = mb.loss_tokens * int64_t(mean_of_means.size());
  stage.zero_grads();
  for (const auto& mb : mean_of_means) {
    mm_loss += stage.forward(0, mb).loss_sum / double(mb.global_loss_tokens);
    stage.backward(0);
  }
  const auto mm_grads = to_host(dev, stage.grads(), stage.param_count());
  CHECK(std::fabs(mm_loss - a.loss) > 100 * kLossTol * a.loss);
  CHECK(worst_relative(stage.registry(), mm_grads, a.grads) > 100 * kGradTol);
}
