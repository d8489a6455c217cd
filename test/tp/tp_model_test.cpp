// Tensor-parallel GptStage ranks (threads with an in-process group) against the
// single-device model with the same weights and microbatches.
//
// Tolerances, fixed before any run. Tensor parallelism changes only the association
// of fp32 sums: each row-parallel GEMM's inner sum is split into T partial sums, the
// cross-entropy's sum of exps is combined from T shards, and under sequence
// parallelism the LayerNorm weight gradients are summed from T row blocks. Each is a
// few ulp (about 1e-7 relative) per operation, grown a little through the layers:
//   - per-token loss: |tp - whole| <= 2e-5 (loss ~ 5.5: about 4e-6 relative);
//     loss sum of a microbatch: relative 1e-5
//   - gradients, per tensor: max |tp - whole| <= 1e-4 * max |whole tensor|
//     + 1e-6 * max |whole, all tensors| (the floor covers tensors whose exact
//     gradient is zero, such as the attention key bias, where fp32 leaves noise)
//   - global gradient norm: relative 1e-5
// Tensors replicated across ranks must hold bitwise identical gradients on every
// rank (checked by assemble()).
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "config/derived.h"
#include "model/init.h"
#include "optim/grad_clip.h"
#include "test/model/test_configs.h"
#include "test/tp/tp_harness.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kTokenLossAbs = 2e-5;
constexpr double kLossRel = 1e-5;
constexpr double kGradRel = 1e-4;
constexpr double kGradFloor = 1e-6;
constexpr double kNormRel = 1e-5;

Config tp_config(int T, int heads = 2, int width = 16) {
  Config c = tiny_config();
  c.mutable_model()->set_heads(heads);
  c.mutable_model()->set_width(width);
  c.mutable_model()->set_init_std(0.2f);  // large enough that every path carries signal
  c.mutable_parallel()->set_tensor(T);    // the padded vocabulary depends on it
  return c;
}

// Microbatches with tokens below `vocab` (for vocabularies smaller than the byte one).
std::vector<data::Microbatch> random_batches(int vocab, int B, int T, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<data::Microbatch> mbs;
  for (int k = 0; k < count; ++k) {
    data::Microbatch mb;
    mb.batch = B;
    mb.seq = T;
    for (int b = 0; b < B; ++b) {
      mb.sample_ids.push_back(k * B + b);
      for (int t = 0; t < T; ++t) {
        mb.tokens.push_back(tok(rng));
        mb.targets.push_back(tok(rng));
        mb.positions.push_back(t);
        mb.segments.push_back(t < T / 2 ? 0 : 1);  // two documents per row
        const float m = t == T / 2 - 1 ? 0.0f : 1.0f;
        mb.loss_mask.push_back(m);
        mb.loss_tokens += m != 0.0f;
      }
    }
    mbs.push_back(std::move(mb));
  }
  set_global_tokens(mbs);
  return mbs;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

double max_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

struct Result {
  std::vector<model::StageLoss> losses;  // per microbatch (rank 0's; all ranks checked equal)
};

// Forward + backward of every microbatch on every rank (slot 0), then the replicated
// gradient reduction of sequence parallelism.
Result run_group(TpStages& g, const std::vector<data::Microbatch>& mbs) {
  const int T = g.size();
  std::vector<std::vector<model::StageLoss>> per_rank(static_cast<size_t>(T));
  on_ranks(T, [&](int t) {
    g[t].zero_grads();
    for (const auto& mb : mbs) {
      per_rank[size_t(t)].push_back(g[t].forward(0, mb));
      g[t].backward(0);
    }
    g[t].reduce_tensor_parallel_grads();
  });
  for (int t = 1; t < T; ++t)
    for (size_t i = 0; i < mbs.size(); ++i) {
      CHECK(per_rank[size_t(t)][i].loss_sum == per_rank[0][i].loss_sum);  // bitwise: same combine everywhere
      CHECK(per_rank[size_t(t)][i].loss_tokens == per_rank[0][i].loss_tokens);
    }
  return {per_rank[0]};
}

void check_grads(const model::GptStage& whole, const std::map<std::string, std::vector<float>>& got) {
  double all = 0;
  std::map<std::string, std::vector<float>> want;
  for (const auto& t : whole.registry().tensors()) {
    want[t.name].assign(whole.grads() + t.offset, whole.grads() + t.offset + t.numel);
    all = std::max(all, max_abs(want[t.name]));
  }
  REQUIRE(got.size() == want.size());
  for (const auto& [name, w] : want) {
    CAPTURE(name);
    const auto& g = got.at(name);
    REQUIRE(g.size() == w.size());
    CHECK(max_diff(g.data(), w.data(), w.size()) <= kGradRel * max_abs(w) + kGradFloor * all);
  }
}

// The whole model and a T-rank group with identical weights (jittered, so that no
// gradient is trivially structured), run on the same microbatches and compared.
void check_against_whole(const Config& c, int T, bool sp, const std::vector<data::Microbatch>& mbs) {
  kernels::cpu::CpuDevice dev(1);
  model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
  jitter_parameters(whole, 0.05, 11);
  TpStages g(c, model::StageRange::whole(c), T, sp);
  for (int t = 0; t < T; ++t) copy_params_by_box(whole, g[t]);

  whole.zero_grads();
  std::vector<model::StageLoss> want;
  for (const auto& mb : mbs) {
    want.push_back(whole.forward(0, mb));
    whole.backward(0);
  }
  const Result got = run_group(g, mbs);
  for (size_t i = 0; i < mbs.size(); ++i) {
    CHECK(got.losses[i].loss_tokens == want[i].loss_tokens);
    CHECK(std::fabs(got.losses[i].loss_sum - want[i].loss_sum) <= kLossRel * std::fabs(want[i].loss_sum));
  }
  std::vector<model::GptStage*> ranks;
  for (int t = 0; t < T; ++t) ranks.push_back(&g[t]);
  check_grads(whole, assemble(ranks, true));

  // The global norm: every rank's norm ranges (replicas counted on rank 0 only).
  double tp_sq = 0;
  for (int t = 0; t < T; ++t)
    tp_sq += optim::sum_squares(*g.devices[size_t(t)], g[t].grads(), g[t].registry().norm_ranges(),
                                {0, g[t].param_count()});
  const double whole_sq =
      optim::sum_squares(dev, whole.grads(), whole.registry().norm_ranges(), {0, whole.param_count()});
  CHECK(std::fabs(std::sqrt(tp_sq) - std::sqrt(whole_sq)) <= kNormRel * std::sqrt(whole_sq));
}

}  // namespace

TEST_CASE("the registry of a tensor-parallel rank: boxes, replicas, norm, initial values") {
  for (int T : {2, 4}) {
    CAPTURE(T);
    const Config c = tp_config(T, 4, 32);
    const model::ParameterRegistry whole(c, model::StageRange::whole(c));
    int64_t counted = 0, held = 0;
    std::map<std::string, int64_t> sliced_elements;
    for (int t = 0; t < T; ++t) {
      const model::ParameterRegistry reg(c, model::StageRange::whole(c), {t, T});
      CHECK(reg.vocab_begin() == t * config::padded_vocab(c) / T);
      for (const auto& e : reg.tensors()) {
        if (e.counts_in_norm) counted += e.numel;
        held += e.numel;
        if (e.replicated) {
          CHECK(e.shape == e.global_shape);
          CHECK(e.counts_in_norm == (t == 0));
        } else {
          sliced_elements[e.name] += e.numel;
        }
      }
      // c_attn: three pieces (q, k, v) of this rank's heads, in that order.
      int pieces = 0;
      for (const auto& e : reg.tensors())
        if (e.name == "h.0.attn.c_attn.weight") {
          CHECK(e.shape == std::vector<int64_t>{32, 32 / T});
          CHECK(e.slice_start == std::vector<int64_t>{0, pieces * 32 + t * 32 / T});
          ++pieces;
        }
      CHECK(pieces == 3);
      // Initial values of every box equal the whole model's at the same global index.
      std::vector<float> mine(size_t(reg.total())), all(size_t(whole.total()));
      model::init_parameters(reg, 7, mine.data());
      model::init_parameters(whole, 7, all.data());
      for (const auto& e : reg.tensors()) {
        const auto& w = whole.at(e.name);
        const int64_t cols = e.shape.size() == 2 ? e.shape[1] : 1, wcols = w.shape.size() == 2 ? w.shape[1] : 1;
        const int64_t c0 = e.shape.size() == 2 ? e.slice_start[1] : 0;
        for (int64_t i = 0; i < e.numel; ++i) {
          const int64_t g = (e.slice_start[0] + i / cols) * wcols + c0 + i % cols;
          REQUIRE(mine[size_t(e.offset + i)] == all[size_t(w.offset + g)]);
        }
      }
    }
    // Every global parameter is counted in the norm exactly once.
    CHECK(counted == config::parameter_count(c));
    // Sliced tensors are covered exactly once across the ranks.
    for (const auto& [name, n] : sliced_elements) {
      CAPTURE(name);
      CHECK(n == whole.at(name).numel);
    }
    CHECK(held > counted);  // the replicas
  }
}

TEST_CASE("a tensor-parallel size that does not divide the model is refused by name") {
  Config c = tp_config(3, 2, 16);
  CHECK_THROWS_WITH_AS(model::ParameterRegistry(c, model::StageRange::whole(c), {0, 3}),
                       doctest::Contains("model.heads 2 is not divisible by the tensor-parallel size 3"),
                       std::invalid_argument);
  Config f = tp_config(2, 2, 16);
  f.mutable_model()->set_ffn_width(30);
  f.mutable_model()->set_heads(4);
  f.mutable_model()->set_width(16);
  f.mutable_parallel()->set_tensor(4);
  CHECK_THROWS_WITH_AS(model::ParameterRegistry(f, model::StageRange::whole(f), {1, 4}),
                       doctest::Contains("MLP width (model.ffn_width) 30 is not divisible"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model::ParameterRegistry(c, model::StageRange::whole(c), {2, 2}),
                       doctest::Contains("tensor-parallel rank 2 of 2"), std::invalid_argument);
}

TEST_CASE("vocabulary-parallel cross-entropy equals the full softmax, token by token") {
  // The byte vocabulary (257 of 384 padded rows at TP2, 512 at TP4) and one where the
  // last rank holds only padding (50 of 128 at TP2: rank 1 has no real row).
  struct Case {
    int T, vocab;
  };
  for (const Case k : {Case{2, 257}, Case{4, 257}, Case{2, 50}}) {
    CAPTURE(k.T);
    CAPTURE(k.vocab);
    Config c = tp_config(k.T, 4, 32);
    c.mutable_model()->set_vocab_size(k.vocab);
    const auto mbs = random_batches(k.vocab, 2, 16, 1, 5);
    kernels::cpu::CpuDevice dev(1);
    model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
    TpStages g(c, model::StageRange::whole(c), k.T, false);
    for (int t = 0; t < k.T; ++t) copy_params_by_box(whole, g[t]);
    const auto want = whole.forward(0, mbs[0]);
    std::vector<model::StageLoss> got(static_cast<size_t>(k.T));
    on_ranks(k.T, [&](int t) { got[size_t(t)] = g[t].forward(0, mbs[0]); });
    const int BT = 32;
    const auto ref = to_host(dev, whole.token_losses(0), BT);
    for (int t = 0; t < k.T; ++t) {
      const auto mine = to_host(*g.devices[size_t(t)], g[t].token_losses(0), BT);
      for (int i = 0; i < BT; ++i) {
        CAPTURE(i);
        CHECK(std::fabs(mine[size_t(i)] - ref[size_t(i)]) <= kTokenLossAbs);
      }
      CHECK(got[size_t(t)].loss_sum == got[0].loss_sum);
    }
    CHECK(got[0].loss_tokens == want.loss_tokens);
    CHECK(std::fabs(got[0].loss_sum - want.loss_sum) <= kLossRel * want.loss_sum);
  }
}

TEST_CASE("tensor-parallel gradients equal the single-device gradients, with and without sequence parallelism") {
  auto mbs = packed_batches();
  // A shorter microbatch than the stage's capacity (1 x 8 of 2 x 16).
  mbs.push_back(pack_rows({Row{{doc_tokens(3, 7), doc_tokens(9, 8)}}}, 8));
  set_global_tokens(mbs);
  SUBCASE("TP2") { check_against_whole(tp_config(2), 2, false, mbs); }
  SUBCASE("TP2, sequence parallel") { check_against_whole(tp_config(2), 2, true, mbs); }
  SUBCASE("TP4") { check_against_whole(tp_config(4, 4, 32), 4, false, mbs); }
  SUBCASE("TP4, sequence parallel") { check_against_whole(tp_config(4, 4, 32), 4, true, mbs); }
  SUBCASE("TP2, a rank of vocabulary padding only") {
    Config c = tp_config(2);
    c.mutable_model()->set_vocab_size(50);
    check_against_whole(c, 2, true, random_batches(50, 2, 16, 2, 9));
  }
}

TEST_CASE("tensor-parallel Llama gradients equal the single-device ones: kv heads split and replicated") {
  // kv heads that divide over the group are split; those that do not (TP 4 of 2 or 1
  // kv heads) are whole on every rank, each rank using its query heads' kv head, and
  // the group sums their gradients (assemble checks the replicas agree bitwise).
  auto llama = [](int T, int kv, int heads = 4, int width = 32) {
    Config c = tiny_llama_config(kv, false);
    c.mutable_model()->set_heads(heads);
    c.mutable_model()->set_width(width);
    c.mutable_model()->set_ffn_width(48);
    c.mutable_model()->set_init_std(0.2f);
    c.mutable_parallel()->set_tensor(T);
    return c;
  };
  const auto mbs = packed_batches();
  SUBCASE("TP2, 2 kv heads split") { check_against_whole(llama(2, 2), 2, false, mbs); }
  SUBCASE("TP2, 2 kv heads split, sequence parallel") { check_against_whole(llama(2, 2), 2, true, mbs); }
  SUBCASE("TP4, 2 kv heads replicated") { check_against_whole(llama(4, 2), 4, false, mbs); }
  SUBCASE("TP4, one kv head replicated, sequence parallel") { check_against_whole(llama(4, 1), 4, true, mbs); }
  SUBCASE("TP2, multi-head") { check_against_whole(llama(2, 4), 2, false, mbs); }
  SUBCASE("TP2, tied head") {
    Config c = llama(2, 2);
    c.mutable_model()->set_tied_embeddings(true);
    check_against_whole(c, 2, true, mbs);
  }
  // model.head_dim: 4 heads of 12 over width 32 (q_proj [48, 32], split by whole heads),
  // and of 4 (q_proj [16, 32]).
  SUBCASE("TP2, heads wider than width / heads, kv heads split, sequence parallel") {
    Config c = llama(2, 2);
    c.mutable_model()->set_head_dim(12);
    check_against_whole(c, 2, true, mbs);
  }
  SUBCASE("TP4, heads narrower than width / heads, one kv head replicated") {
    Config c = llama(4, 1);
    c.mutable_model()->set_head_dim(4);
    check_against_whole(c, 4, false, mbs);
  }
}

TEST_CASE("TP2 x PP2 chained by hand equals the whole model (sequence parallel on and off)") {
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    Config c = tp_config(2);
    c.mutable_model()->set_layers(2);
    const auto mbs = packed_batches();
    const int m = int(mbs.size()), D = c.model().width();
    kernels::cpu::CpuDevice dev(1);
    model::GptStage whole(c, model::StageRange::whole(c), dev, 1);
    jitter_parameters(whole, 0.05, 3);
    whole.zero_grads();
    double want = 0;
    for (const auto& mb : mbs) {
      want += whole.forward(0, mb).loss_sum;
      whole.backward(0);
    }
    // One communicator group per stage, as the topology builds them.
    TpStages first(c, model::StageRange::pipeline(c, 0, 2), 2, sp, m);
    TpStages last(c, model::StageRange::pipeline(c, 1, 2), 2, sp, m);
    for (int t = 0; t < 2; ++t) {
      copy_params_by_box(whole, first[t]);
      copy_params_by_box(whole, last[t]);
    }
    std::vector<double> loss(2, 0.0);
    on_ranks(2, [&](int t) {
      first[t].zero_grads();
      last[t].zero_grads();
      for (int i = 0; i < m; ++i) {
        first[t].forward(i, mbs[size_t(i)]);
        // Under sequence parallelism the handoff is this rank's rows only.
        const int64_t rows = first[t].activation_rows(mbs[size_t(i)].batch, mbs[size_t(i)].seq);
        CHECK(rows == (sp ? 16 : 32));
        const auto h = to_host(*first.devices[size_t(t)], first[t].output(i), rows * D);
        loss[size_t(t)] += last[t].forward(i, mbs[size_t(i)], h.data()).loss_sum;
      }
      for (int i = 0; i < m; ++i) {
        last[t].backward(i);
        first[t].backward(i, last[t].input_grad(i));
      }
      first[t].reduce_tensor_parallel_grads();
      last[t].reduce_tensor_parallel_grads();
      // The tied embedding: both halves summed, as the embedding group does.
      const auto& wte = first[t].registry().at("wte.weight");
      first[t].device().add(first[t].grad("wte.weight"), first[t].grad("wte.weight"), last[t].grad("wte.weight"),
                            wte.numel);
    });
    CHECK(loss[0] == loss[1]);
    CHECK(std::fabs(loss[0] - want) <= kLossRel * want);
    auto got = assemble({&first[0], &first[1]}, true);
    for (auto& [name, v] : assemble({&last[0], &last[1]}, true))
      if (name != "wte.weight") got[name] = v;
    check_grads(whole, got);
  }
}

TEST_CASE("two tensor-parallel runs are bitwise identical") {
  const Config c = tp_config(2);
  const auto mbs = packed_batches();
  std::map<std::string, std::vector<float>> first;
  std::vector<double> losses;
  for (int run = 0; run < 2; ++run) {
    TpStages g(c, model::StageRange::whole(c), 2, true, 1, 2);
    const auto r = run_group(g, mbs);
    auto grads = assemble({&g[0], &g[1]}, true);
    if (run == 0) {
      first = grads;
      for (const auto& l : r.losses) losses.push_back(l.loss_sum);
    } else {
      CHECK(grads == first);
      for (size_t i = 0; i < losses.size(); ++i) CHECK(r.losses[i].loss_sum == losses[i]);
    }
  }
}

TEST_CASE("sequence parallelism refuses a microbatch whose tokens do not split over the group") {
  const Config c = tp_config(2);
  TpStages g(c, model::StageRange::whole(c), 2, true);
  const auto odd = pack_rows({Row{{doc_tokens(3, 1)}}}, 7);
  // Both ranks check before any collective, so neither waits for the other.
  on_ranks(2, [&](int t) {
    CHECK_THROWS_WITH_AS(g[t].forward(0, odd), doctest::Contains("1 x 7 tokens does not split over 2"),
                         std::invalid_argument);
  });
}
