#include "comm/gloo_groups.h"

#include <algorithm>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "util/thread_group.h"

namespace troupe::comm {

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kDataParallel: return "DP";
    case GroupKind::kTensorParallel: return "TP";
    case GroupKind::kPipelineNeighbours: return "PP";
    case GroupKind::kEmbedding: return "embedding";
  }
  return "?";
}

std::vector<GroupSpec> layout_groups(int dp, int pp, int tp) {
  if (dp < 1 || pp < 1 || tp < 1)
    throw CommError(fmt::format("layout dp={} pp={} tp={}: every dimension must be at least 1", dp, pp, tp));
  const auto index = [&](int d, int p, int t) { return (d * pp + p) * tp + t; };
  std::vector<GroupSpec> out;
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      GroupSpec g{GroupKind::kDataParallel, fmt::format("dp[pp{}/tp{}]", p, t), {}};
      for (int d = 0; d < dp; ++d) g.members.push_back(index(d, p, t));
      out.push_back(std::move(g));
    }
  for (int d = 0; d < dp; ++d)
    for (int p = 0; p < pp; ++p) {
      GroupSpec g{GroupKind::kTensorParallel, fmt::format("tp[dp{}/pp{}]", d, p), {}};
      for (int t = 0; t < tp; ++t) g.members.push_back(index(d, p, t));
      out.push_back(std::move(g));
    }
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t)
      for (int p = 0; p + 1 < pp; ++p)
        out.push_back({GroupKind::kPipelineNeighbours, fmt::format("pp[dp{}/tp{}]:{}-{}", d, t, p, p + 1),
                       {index(d, p, t), index(d, p + 1, t)}});
  if (pp > 1)
    for (int d = 0; d < dp; ++d)
      for (int t = 0; t < tp; ++t)
        out.push_back({GroupKind::kEmbedding, fmt::format("embedding[dp{}/tp{}]", d, t),
                       {index(d, 0, t), index(d, pp - 1, t)}});
  return out;
}

void GlooRankComms::abort_all(const std::string& why) const {
  for (const auto& [spec, c] : all) c->abort(why);
}

GlooRankComms connect_rank_comms(int dp, int pp, int tp, int rank, Store& store, const std::string& prefix,
                                 const GlooOptions& options) {
  if (rank < 0 || rank >= dp * pp * tp)
    throw CommError(fmt::format("rank {} outside the layout dp={} pp={} tp={}", rank, dp, pp, tp));
  GlooRankComms out;
  for (const auto& g : layout_groups(dp, pp, tp)) {
    const auto it = std::find(g.members.begin(), g.members.end(), rank);
    if (it == g.members.end()) continue;
    const int member = int(it - g.members.begin());
    auto c = connect_gloo(store, prefix, g.name, member, int(g.members.size()), options);
    switch (g.kind) {
      case GroupKind::kDataParallel: out.data_parallel = c; break;
      case GroupKind::kTensorParallel: out.tensor_parallel = c; break;
      case GroupKind::kEmbedding: out.embedding = c; break;
      case GroupKind::kPipelineNeighbours: (member == 0 ? out.pipeline_next : out.pipeline_prev) = c; break;
    }
    out.all.emplace_back(g, std::move(c));
  }
  return out;
}

std::vector<GlooRankComms> connect_ranks_comms(int dp, int pp, int tp, const std::vector<int>& ranks, Store& store,
                                               const std::string& prefix, const GlooOptions& options) {
  std::vector<GlooRankComms> out(ranks.size());
  std::vector<std::exception_ptr> errors(ranks.size());
  // A rank whose thread cannot be started leaves its peers to time out in their
  // connects; the call then ends with the thread's error, never an abort.
  util::run_on_threads(int(ranks.size()), "connecting the ranks' communicators", [&](int i) {
    try {
      out[size_t(i)] = connect_rank_comms(dp, pp, tp, ranks[size_t(i)], store, prefix, options);
    } catch (...) {
      errors[size_t(i)] = std::current_exception();
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace troupe::comm
