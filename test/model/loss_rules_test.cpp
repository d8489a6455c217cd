// The loss rules of docs/numerics.md ("Packed windows") at the model: per-document attention,
// padding carries neither loss nor gradient, the EOD prediction is learned.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "config/derived.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

struct Run {
  model::StageLoss loss;
  std::vector<float> logits, token_losses, grads;
};

Run run(model::GptStage& stage, const data::Microbatch& mb) {
  kernels::Device& dev = stage.device();
  const int BT = mb.batch * mb.seq;
  const int64_t Vp = config::padded_vocab(tiny_config());
  stage.zero_grads();
  Run r;
  r.loss = stage.forward(0, mb);
  r.logits = to_host(dev, stage.logits(0), BT * Vp);
  r.token_losses = to_host(dev, stage.token_losses(0), BT);
  stage.backward(0);
  r.grads = to_host(dev, stage.grads(), stage.param_count());
  return r;
}

}  // namespace

TEST_CASE("document mask: replacing the first packed document leaves the second one's logits unchanged") {
  // Tolerance fixed up front: 1e-6 absolute on logits of size ~1. Every kernel
  // computes a row from that row's own document only, so the expected difference is
  // zero up to a possible change of GEMM tiling, which does not apply here.
  constexpr float kTol = 1e-6f;
  Config c = tiny_config();
  c.mutable_model()->set_init_std(0.2f);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1, {1, 16});
  const int64_t Vp = config::padded_vocab(c);
  const int V = c.model().vocab_size();
  const auto second = doc_tokens(7, 42);
  const auto base = pack_rows({Row{{doc_tokens(6, 1), second}}}, 16);
  const auto same_len = pack_rows({Row{{doc_tokens(6, 2), second}}}, 16);
  const auto shorter = pack_rows({Row{{doc_tokens(3, 3), second}}}, 16);
  auto mbs = std::vector<data::Microbatch>{base, same_len, shorter};
  for (auto& mb : mbs) mb.global_loss_tokens = mb.loss_tokens;
  const Run a = run(stage, mbs[0]), b = run(stage, mbs[1]), s = run(stage, mbs[2]);
  // The second document starts at position 7 (6 tokens + EOD), or 4 after the shorter one.
  REQUIRE(mbs[0].positions[7] == 0);
  REQUIRE(mbs[2].positions[4] == 0);
  double first_doc_change = 0;
  for (int t = 0; t < 16; ++t) {
    const bool second_doc = t >= 7 && t < 15;  // 7 tokens + EOD
    for (int j = 0; j < V; ++j) {
      const float d = std::fabs(a.logits[size_t(t * Vp + j)] - b.logits[size_t(t * Vp + j)]);
      if (second_doc) {
        REQUIRE(d <= kTol);
        // shifted by 3 positions, same position IDs: same logits
        REQUIRE(std::fabs(a.logits[size_t(t * Vp + j)] - s.logits[size_t((t - 3) * Vp + j)]) <= kTol);
      } else if (t < 7) {
        first_doc_change = std::max<double>(first_doc_change, d);
      }
    }
  }
  CHECK(first_doc_change > 1e-3);  // the replaced document itself did change
}

TEST_CASE("padding contributes no loss and no gradient") {
  Config c = tiny_config();
  c.mutable_model()->set_init_std(0.2f);
  kernels::cpu::CpuDevice dev(2);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1, {2, 16});
  // Same documents; the padding tail holds different token IDs (and therefore different
  // embeddings and hidden states). Loss and every gradient must be identical bit for bit:
  // nothing reads a padding position's activations except the padding itself, and its
  // predictions are masked, so its contributions are exact zeros.
  auto p1 = pack_rows({Row{{doc_tokens(5, 1)}, kEod}, Row{{doc_tokens(30, 2)}}}, 16);
  auto p2 = pack_rows({Row{{doc_tokens(5, 1)}, 17}, Row{{doc_tokens(30, 2)}}}, 16);
  p1.global_loss_tokens = p2.global_loss_tokens = p1.loss_tokens;
  REQUIRE(p1.padding_tokens == 10);
  REQUIRE(p1.tokens != p2.tokens);
  const Run a = run(stage, p1), b = run(stage, p2);
  CHECK(a.loss.loss_tokens == 5 + 16);  // 5 tokens predict their successor or EOD; row 2 all 16
  CHECK(a.loss.loss_sum == b.loss.loss_sum);
  CHECK(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)) == 0);
  for (int t = 0; t < 16; ++t)
    if (p1.segments[size_t(t)] == kPadSegment) CHECK(a.token_losses[size_t(t)] == 0.0f);
}

TEST_CASE("the EOD prediction carries loss; the prediction after EOD does not") {
  Config c = tiny_config();
  kernels::cpu::CpuDevice dev(1);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1, {1, 16});
  auto mb = pack_rows({Row{{doc_tokens(4, 1), doc_tokens(12, 2)}}}, 16);
  // position 3 predicts EOD (target 256, mask 1); position 4 is the EOD predicting the
  // next document's first token (mask 0)
  REQUIRE(mb.targets[3] == kEod);
  REQUIRE(mb.loss_mask[3] == 1.0f);
  REQUIRE(mb.tokens[4] == kEod);
  REQUIRE(mb.loss_mask[4] == 0.0f);
  mb.global_loss_tokens = mb.loss_tokens;
  const Run a = run(stage, mb);
  CHECK(a.token_losses[3] > 1.0f);  // ~ log(257) for a fresh model
  CHECK(a.token_losses[4] == 0.0f);
  double sum = 0;
  for (float l : a.token_losses) sum += l;
  CHECK(a.loss.loss_sum == sum);
  CHECK(a.loss.loss_tokens == 15);

  auto no_eod = mb;
  no_eod.loss_mask[3] = 0.0f;
  no_eod.loss_tokens -= 1;
  no_eod.global_loss_tokens = no_eod.loss_tokens;
  const Run b = run(stage, no_eod);
  CHECK(b.loss.loss_sum == doctest::Approx(a.loss.loss_sum - a.token_losses[3]).epsilon(1e-12));
  // The EOD row of the tied embedding is pushed up by the EOD prediction.
  const int64_t eod = stage.registry().at("wte.weight").offset + int64_t(kEod) * 16;
  double diff = 0;
  for (int d = 0; d < 16; ++d) diff += std::fabs(a.grads[size_t(eod + d)] * 15.0 - b.grads[size_t(eod + d)] * 14.0);
  CHECK(diff > 1e-4);
}

TEST_CASE("bad microbatches are refused with one clear message") {
  Config c = tiny_config();
  kernels::cpu::CpuDevice dev(1);
  model::GptStage stage(c, model::StageRange::whole(c), dev, 1);
  auto mb = packed_batches()[0];
  auto bad = mb;
  bad.tokens[5] = 300;
  CHECK_THROWS_WITH(stage.forward(0, bad), "microbatch row 0 (sample 0), position 5: token 300 outside [0, vocab_size 257)");
  bad = mb;
  bad.positions[17] = 40;
  CHECK_THROWS_WITH(stage.forward(0, bad), "microbatch row 1 (sample 1), position 1: position ID 40 outside [0, max_positions 32)");
  bad = mb;
  bad.segments[2] = 1;  // 0 0 1 0 ...: document 0 resumes
  CHECK_THROWS_WITH(stage.forward(0, bad),
                    "microbatch row 0 (sample 0), position 3: segment 0 resumes after another document started (segments must be contiguous)");
  bad = mb;
  bad.loss_mask[0] = 0.5f;
  CHECK_THROWS_WITH(stage.forward(0, bad), "microbatch row 0 (sample 0), position 0: loss_mask 0.500000 is not 0 or 1");
  bad = mb;
  bad.targets.pop_back();
  CHECK_THROWS_WITH(stage.forward(0, bad), "microbatch targets has 31 entries, expected batch x seq = 32");
  bad = mb;
  bad.global_loss_tokens = 3;
  CHECK_THROWS_WITH(stage.forward(0, bad), "microbatch global_loss_tokens 3 is below its own 25 loss-bearing tokens");
  CHECK_THROWS_WITH(stage.backward(0), "GptStage::backward: slot 0 holds no forward");
  CHECK_THROWS_WITH(stage.forward(1, mb), "GptStage::forward: slot 1 outside [0, 1)");
}
