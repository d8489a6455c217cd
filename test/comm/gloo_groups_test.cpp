// The groups of a (dp, pp, tp) layout across processes: names and members mirror the
// in-process plan, and every rank of a DP2 x PP2 layout connects its groups and uses
// them (ranks as threads of one process here, each with its own Gloo contexts).
#include <doctest/doctest.h>

#include <map>

#include "comm/gloo_check.h"
#include "comm/gloo_groups.h"
#include "test/comm/gloo_test_util.h"

using namespace troupe;
using namespace gloo_test;

TEST_CASE("layout_groups: names, members in group-rank order, and counts") {
  const auto g = comm::layout_groups(2, 2, 1);
  std::vector<std::string> names;
  for (const auto& s : g) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"dp[pp0/tp0]", "dp[pp1/tp0]", "tp[dp0/pp0]", "tp[dp0/pp1]",
                                          "tp[dp1/pp0]", "tp[dp1/pp1]", "pp[dp0/tp0]:0-1", "pp[dp1/tp0]:0-1",
                                          "embedding[dp0/tp0]", "embedding[dp1/tp0]"});
  // Global index (d * pp + p) * tp + t: dp[pp1/tp0] holds (0,1,0)=1 and (1,1,0)=3.
  CHECK(g[1].members == std::vector<int>{1, 3});
  CHECK(g[1].kind == comm::GroupKind::kDataParallel);
  CHECK(g[4].members == std::vector<int>{2});
  CHECK(g[7].members == std::vector<int>{2, 3});
  CHECK(g[7].kind == comm::GroupKind::kPipelineNeighbours);
  CHECK(g[9].members == std::vector<int>{2, 3});

  std::map<comm::GroupKind, int> count;
  for (const auto& s : comm::layout_groups(2, 3, 2)) {
    ++count[s.kind];
    if (s.kind == comm::GroupKind::kDataParallel) CHECK(s.members.size() == 2);
    if (s.kind == comm::GroupKind::kTensorParallel) CHECK(s.members.size() == 2);
  }
  CHECK(count[comm::GroupKind::kDataParallel] == 3 * 2);
  CHECK(count[comm::GroupKind::kTensorParallel] == 2 * 3);
  CHECK(count[comm::GroupKind::kPipelineNeighbours] == 2 * 2 * 2);
  CHECK(count[comm::GroupKind::kEmbedding] == 2 * 2);
  const auto last_emb = comm::layout_groups(2, 3, 2).back();
  CHECK(last_emb.name == "embedding[dp1/tp1]");
  CHECK(last_emb.members == std::vector<int>{(1 * 3 + 0) * 2 + 1, (1 * 3 + 2) * 2 + 1});

  CHECK(comm::layout_groups(1, 1, 1).size() == 2);
  CHECK_THROWS_WITH_AS(comm::layout_groups(0, 1, 1), doctest::Contains("dp=0"), comm::CommError);
}

TEST_CASE("DP2 x PP2: every rank connects its groups and uses them") {
  comm::MemoryStore store;
  const int dp = 2, pp = 2, tp = 1;
  auto comms = comm::connect_ranks_comms(dp, pp, tp, {0, 1, 2, 3}, store, fresh_prefix("layout"), options());
  REQUIRE(comms.size() == 4);
  for (int r = 0; r < 4; ++r) {
    const int p = r % 2;
    CHECK(comms[r].data_parallel->size() == 2);
    CHECK(comms[r].data_parallel->rank() == r / 2);
    CHECK(comms[r].tensor_parallel->size() == 1);
    REQUIRE(comms[r].embedding);
    CHECK(comms[r].embedding->rank() == p);
    CHECK(bool(comms[r].pipeline_next) == (p == 0));
    CHECK(bool(comms[r].pipeline_prev) == (p == 1));
    CHECK(comms[r].all.size() == 4);  // dp, tp, one pp pair, embedding
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      auto& c = comms[r];
      const int d = r / 2, p = r % 2;
      std::vector<float> grads(1000, float(d + 1));
      c.data_parallel->all_reduce_sum(grads);  // 1 + 2
      std::vector<float> wte(50, float(p + 1));
      c.embedding->all_reduce_sum(wte);  // first + last stage
      std::vector<float> act(64, float(d * 10 + p));
      if (p == 0) {
        c.pipeline_next->send(act, 1, 0);
        c.pipeline_next->recv(act, 1, 1);  // the gradient coming back
      } else {
        c.pipeline_prev->recv(act, 0, 0);
        for (float& x : act) x += 100;
        c.pipeline_prev->send(act, 0, 1);
      }
      c.tensor_parallel->barrier();
      ok[r] = grads == std::vector<float>(1000, 3.0f) && wte == std::vector<float>(50, 3.0f) &&
              act == std::vector<float>(64, float(d * 10 + 100));
    });
  for (auto& t : threads) t.join();
  CHECK(ok == std::vector<int>{1, 1, 1, 1});
  comms[0].abort_all("done");
  std::vector<float> v(2);
  CHECK_THROWS_AS(comms[0].data_parallel->all_reduce_sum(v), comm::CommError);
}

TEST_CASE("layout check: every group alone and concurrently, every size verified, rows led by member 0") {
  comm::LayoutCheck check;
  check.dp = 2;
  check.pp = 2;
  check.tp = 1;
  check.max_count = {{comm::GroupKind::kDataParallel, 5000},
                     {comm::GroupKind::kPipelineNeighbours, 300},
                     {comm::GroupKind::kEmbedding, 700}};
  check.factor = 16;
  check.iterations = 2;
  check.options = options(20000ms);
  check.world_timeout = 60000ms;
  CHECK(comm::sweep_counts(5000, 16) == std::vector<size_t>{1, 16, 256, 4096, 5000});
  CHECK(comm::sweep_counts(4096, 16) == std::vector<size_t>{1, 16, 256, 4096});
  CHECK(comm::sweep_counts(0, 16).empty());

  comm::MemoryStore store;
  const std::string prefix = fresh_prefix("check");
  std::vector<std::vector<comm::GroupRows>> out(4);
  std::vector<std::thread> ranks;
  std::vector<std::exception_ptr> errors(4);
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      try {
        out[r] = comm::run_layout_check(check, r, store, prefix);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  // Rank 0 leads dp[pp0/tp0], pp[dp0/tp0]:0-1 and embedding[dp0/tp0]; rank 3 leads nothing.
  std::vector<std::string> led;
  for (const auto& g : out[0]) led.push_back(g.phase + " " + g.group.name);
  CHECK(led == std::vector<std::string>{"alone dp[pp0/tp0]", "alone pp[dp0/tp0]:0-1", "alone embedding[dp0/tp0]",
                                        "concurrent dp[pp0/tp0]", "concurrent pp[dp0/tp0]:0-1",
                                        "concurrent embedding[dp0/tp0]"});
  CHECK(out[3].empty());
  CHECK(out[1].size() == 2);  // dp[pp1/tp0], both phases
  for (const auto& rank_rows : out)
    for (const auto& g : rank_rows) {
      const size_t sizes = g.group.kind == comm::GroupKind::kDataParallel ? 5 : 4;
      CHECK(g.rows.size() == 4 * sizes);
      for (const auto& row : g.rows) {
        CHECK(row.wrong == 0);
        CHECK(row.iterations == 2);
        CHECK(row.median_s > 0);
      }
      CHECK(g.rows.back().op == comm::CheckOp::kSendRecv);
      CHECK(g.rows.back().count == (g.group.kind == comm::GroupKind::kDataParallel ? 5000u
                                    : g.group.kind == comm::GroupKind::kEmbedding ? 700u
                                                                                  : 300u));
    }
}
