#include "engine/topology.h"

#include <stdexcept>

#include <fmt/format.h>

#include "comm/gloo_groups.h"
#include "comm/inprocess.h"
#include "comm/ordered_reduction.h"

namespace troupe::engine {

Topology Topology::logical(const Config& c) {
  return {c.parallel().data(), c.parallel().pipeline(), c.parallel().tensor(), 0};
}

std::vector<Rank> Topology::all_ranks() const {
  std::vector<Rank> out;
  for (int32_t d = 0; d < dp; ++d)
    for (int32_t p = 0; p < pp; ++p)
      for (int32_t t = 0; t < tp; ++t) out.push_back({d, p, t});
  return out;
}

std::string rank_path(std::string_view kind, const Rank& r) {
  return fmt::format("{}/dp{}/pp{}/tp{}", kind, r.dp, r.pp, r.tp);
}
std::string stage_path(const Rank& r) { return rank_path("stage", r); }
std::string optim_path(const Rank& r) { return rank_path("optim", r); }
std::string writer_path(const Rank& r) { return rank_path("writer", r); }
std::string rank_text(const Rank& r) { return fmt::format("(dp {}, pp {}, tp {})", r.dp, r.pp, r.tp); }
std::string loader_path(int32_t dp) { return fmt::format("loader/dp{}", dp); }

std::vector<std::string> all_paths(const Topology& t) {
  std::vector<std::string> out{coordinator_path(), metrics_path()};
  for (int32_t d = 0; d < t.dp; ++d) out.push_back(loader_path(d));
  for (const auto& r : t.all_ranks()) {
    out.push_back(stage_path(r));
    out.push_back(optim_path(r));
    out.push_back(writer_path(r));
  }
  return out;
}

std::shared_ptr<comm::Communicator>& slot_of(RankComms& r, const comm::GroupSpec& g, int member) {
  switch (g.kind) {
    case comm::GroupKind::kDataParallel: return r.data_parallel;
    case comm::GroupKind::kTensorParallel: return r.tensor_parallel;
    case comm::GroupKind::kEmbedding: return r.embedding;
    case comm::GroupKind::kPipelineNeighbours: return member == 0 ? r.pipeline_next : r.pipeline_prev;
  }
  throw std::logic_error("slot_of: unknown group kind");
}

std::chrono::milliseconds collective_timeout(const Config& c) {
  if (c.supervision().step_watchdog_s() > 0)
    return std::chrono::milliseconds(int64_t(c.supervision().step_watchdog_s() * 1500) + 1000);
  return std::chrono::milliseconds(120000);
}

void CommPlan::abort_all(const std::string& why) const {
  for (const auto& c : all_members) c->abort(why);
  for (const auto& r : ordered_reductions) r->abort(why);
}

CommPlan make_inprocess_comms(const Topology& t, std::chrono::milliseconds timeout) {
  CommPlan plan;
  plan.ranks.resize(t.ranks());
  for (const auto& g : comm::layout_groups(t.dp, t.pp, t.tp)) {
    if (g.kind == comm::GroupKind::kPipelineNeighbours) continue;  // one process: neighbours hand over pointers
    const auto made = comm::make_inprocess_group(int(g.members.size()), g.name, timeout);
    plan.all_members.insert(plan.all_members.end(), made.begin(), made.end());
    for (size_t i = 0; i < g.members.size(); ++i) slot_of(plan.ranks[size_t(g.members[i])], g, int(i)) = made[i];
  }
  return plan;
}

}  // namespace troupe::engine
