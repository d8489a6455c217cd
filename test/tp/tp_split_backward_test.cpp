// The split backward of ZB-H1 (GptStage::backward_input, backward_weight) under tensor
// parallelism: on every rank of a TP2 group, with and without sequence parallelism,
// GPT-2 (the qkv projection in per-rank pieces) and Llama (kv heads split, and
// replicated at TP4), the gradients of B0 W0 B1 W1 and of B0 B1 W0 W1 are bitwise those
// of backward() on the same rank. Exact equality, fixed before the first run: the same
// kernels and collectives on the same inputs, each parameter's additions in
// microbatch order.
#include <doctest/doctest.h>

#include <cstring>

#include "test/model/test_configs.h"
#include "test/tp/tp_harness.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

enum class Order { kWhole, kWeightEach, kWeightAfter };

// Per rank: its gradients after two microbatches forwarded into two slots and
// backwarded in `order`, then the replicated gradients summed over the group.
std::vector<std::vector<float>> run(const Config& c, int T, bool sp, Order order) {
  TpStages g(c, model::StageRange::whole(c), T, sp, /*slots=*/2);
  auto mbs = packed_batches();
  mbs[0].first_slot = 0;
  mbs[1].first_slot = mbs[0].batch;
  std::vector<std::vector<float>> out(static_cast<size_t>(T));
  on_ranks(T, [&](int t) {
    model::GptStage& s = g[t];
    s.zero_grads();
    s.forward(0, mbs[0]);
    s.forward(1, mbs[1]);
    if (order == Order::kWhole) {
      s.backward(0);
      s.backward(1);
    } else if (order == Order::kWeightEach) {
      s.backward_input(0);
      s.backward_weight(0);
      s.backward_input(1);
      s.backward_weight(1);
    } else {
      s.backward_input(0);
      s.backward_input(1);
      s.backward_weight(0);
      s.backward_weight(1);
    }
    s.reduce_tensor_parallel_grads();
    out[size_t(t)].assign(s.grads(), s.grads() + s.param_count());
  });
  return out;
}

void check(Config c, int T, bool sp) {
  c.mutable_model()->set_init_std(0.2f);
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  c.mutable_parallel()->set_tensor(T);
  c.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
  const auto whole = run(c, T, sp, Order::kWhole);
  for (Order order : {Order::kWeightEach, Order::kWeightAfter}) {
    CAPTURE(order == Order::kWeightEach ? "B0 W0 B1 W1" : "B0 B1 W0 W1");
    const auto split = run(c, T, sp, order);
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      REQUIRE(split[size_t(t)].size() == whole[size_t(t)].size());
      CHECK(std::memcmp(split[size_t(t)].data(), whole[size_t(t)].data(), whole[size_t(t)].size() * sizeof(float)) ==
            0);
    }
  }
}

}  // namespace

TEST_CASE("tensor-parallel split backward gives the bits of backward(): GPT-2") {
  SUBCASE("TP2") { check(tiny_config(), 2, false); }
  SUBCASE("TP2, sequence parallel") { check(tiny_config(), 2, true); }
}

TEST_CASE("tensor-parallel split backward gives the bits of backward(): Llama") {
  Config c = tiny_llama_config(2, false);
  c.mutable_model()->set_width(32);
  c.mutable_model()->set_ffn_width(48);
  SUBCASE("TP2, kv heads split") { check(c, 2, false); }
  SUBCASE("TP2, kv heads split, sequence parallel, tied") {
    c.mutable_model()->set_tied_embeddings(true);
    check(c, 2, true);
  }
  SUBCASE("TP4, kv heads replicated, sequence parallel") { check(c, 4, true); }
}
