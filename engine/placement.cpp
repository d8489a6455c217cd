#include "engine/placement.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "config/derived.h"
#include "config/error.h"

namespace troupe::engine {
namespace {

// Ranks in the order a placement cuts into consecutive blocks.
std::vector<int32_t> rank_order(const Topology& t, ClusterConfig::Placement p) {
  std::vector<int32_t> out;
  if (p == ClusterConfig::BY_STAGE) {
    for (int32_t pp = 0; pp < t.pp; ++pp)
      for (int32_t d = 0; d < t.dp; ++d)
        for (int32_t k = 0; k < t.tp; ++k) out.push_back(t.index({d, pp, k}));
  } else {
    for (const auto& r : t.all_ranks()) out.push_back(t.index(r));
  }
  return out;
}

}  // namespace

bool cluster_mode(const Config& c) { return c.cluster().workers() > 0; }

std::vector<config::Violation> cluster_violations(const Config& c) {
  std::vector<config::Violation> out;
  const auto& k = c.cluster();
  // Workers host physical ranks; the logical ranks a physical rank hosts go with it.
  // (The configured placement: what a run starts on.)
  const auto t = Topology::logical(c).placed_on(config::physical_replicas(c)).physical_layout();
  const int32_t ranks = t.ranks();
  if (k.workers() < 0) out.push_back({"cluster.workers", fmt::format("{} is negative", k.workers())});
  if (k.spares() < 0) out.push_back({"cluster.spares", fmt::format("{} is negative", k.spares())});
  if (!out.empty()) return out;
  if (k.workers() == 0) {
    if (k.spares() > 0)
      out.push_back({"cluster.spares", fmt::format("{} spare(s) without cluster.workers: spares only exist in "
                                                   "cluster mode (set cluster.workers)", k.spares()),
                     {"cluster.workers"}});
    if (k.worker_size() > 0)
      out.push_back({"cluster.worker", "rank lists without cluster.workers: set cluster.workers to their number",
                     {"cluster.workers"}});
    return out;
  }
  if (k.workers() > ranks)
    out.push_back({"cluster.workers",
                   fmt::format("{} workers for {} rank(s) (DP{} x PP{} x TP{}): every active worker hosts at least "
                               "one rank; make the others spares (cluster.spares)",
                               k.workers(), ranks, t.dp, t.pp, t.tp)});
  if (!(k.heartbeat_interval_s() > 0))
    out.push_back({"cluster.heartbeat_interval_s", fmt::format("{} must be positive", k.heartbeat_interval_s())});
  else if (!(k.connection_timeout_s() >= 2 * k.heartbeat_interval_s()))
    out.push_back({"cluster.connection_timeout_s",
                   fmt::format("{} must be at least twice cluster.heartbeat_interval_s = {} (a connection is "
                               "dropped when no heartbeat arrived for this long)",
                               k.connection_timeout_s(), k.heartbeat_interval_s()),
                   {"cluster.heartbeat_interval_s"}});
  if (!(k.worker_wait_s() > 0))
    out.push_back({"cluster.worker_wait_s", fmt::format("{} must be positive", k.worker_wait_s())});
  if (!(k.handshake_timeout_s() > 0 && k.handshake_timeout_s() <= 3600))
    out.push_back({"cluster.handshake_timeout_s",
                   fmt::format("{} must be in (0, 3600] (seconds a connection may take to join)",
                               k.handshake_timeout_s())});
  if (k.min_physical_replicas() < 1 || k.min_physical_replicas() > c.parallel().data())
    out.push_back({"cluster.min_physical_replicas",
                   fmt::format("{} is outside 1..parallel.data = {} (the fewest physical data-parallel replicas a "
                               "shrink may leave)",
                               k.min_physical_replicas(), c.parallel().data()),
                   {"parallel.data"}});
  if (k.placement() == ClusterConfig::EXPLICIT) {
    if (k.worker_size() != k.workers()) {
      out.push_back({"cluster.worker",
                     fmt::format("placement EXPLICIT needs one rank list per active worker: {} list(s) for "
                                 "cluster.workers = {}",
                                 k.worker_size(), k.workers()),
                     {"cluster.workers", "cluster.placement"}});
      return out;
    }
    std::map<int32_t, int32_t> seen;  // rank -> worker
    for (int w = 0; w < k.worker_size(); ++w) {
      if (k.worker(w).rank_size() == 0)
        out.push_back({fmt::format("cluster.worker[{}]", w), "an active worker without ranks (make it a spare)"});
      for (int i = 0; i < k.worker(w).rank_size(); ++i) {
        const int32_t r = k.worker(w).rank(i);
        const auto field = fmt::format("cluster.worker[{}].rank[{}]", w, i);
        if (r < 0 || r >= ranks) {
          out.push_back({field, fmt::format("rank {} is outside the layout's ranks 0..{} (DP{} x PP{} x TP{}; rank "
                                            "= (d * pp + p) * tp + t)",
                                            r, ranks - 1, t.dp, t.pp, t.tp)});
          continue;
        }
        if (auto it = seen.find(r); it != seen.end())
          out.push_back({field, fmt::format("rank {} is placed twice (also on worker {})", r, it->second)});
        else
          seen[r] = w;
      }
    }
    if (out.empty() && int32_t(seen.size()) != ranks) {
      std::string missing;
      for (int32_t r = 0; r < ranks; ++r)
        if (!seen.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      out.push_back({"cluster.worker", fmt::format("rank(s) {} are placed on no worker", missing)});
    }
  } else if (k.worker_size() > 0) {
    out.push_back({"cluster.worker",
                   fmt::format("rank lists are only read with placement EXPLICIT (placement is {})",
                               ClusterConfig::Placement_Name(k.placement())),
                   {"cluster.placement"}});
  }
  return out;
}

void validate_cluster(const Config& c, const config::Origins& origins) {
  const auto v = cluster_violations(c);
  if (!v.empty()) throw config::ConfigError(config::describe(v.front(), origins));
}

Placement placement_of(const Config& c, const Topology& logical) {
  return placement_of(c, logical, c.cluster().workers());
}

Placement placement_of(const Config& c, const Topology& logical, int32_t workers) {
  if (!cluster_violations(c).empty() || !cluster_mode(c))
    throw std::invalid_argument("placement_of: the cluster section is not a valid cluster layout");
  const auto t = logical.physical_layout();
  const auto& k = c.cluster();
  // The rank lists of EXPLICIT name the configured placement's physical ranks on the
  // configured workers; another placement is placed in the configured order.
  if (k.placement() == ClusterConfig::EXPLICIT &&
      (logical.physical_replicas() != config::physical_replicas(c) || workers != k.workers()))
    throw std::invalid_argument(fmt::format("placement_of: cluster.worker lists the ranks of {} physical replicas "
                                            "on {} workers, not of {} on {}",
                                            config::physical_replicas(c), k.workers(), logical.physical_replicas(),
                                            workers));
  if (workers < 1 || workers > t.ranks())
    throw std::invalid_argument(fmt::format("placement_of: {} workers for {} physical ranks", workers, t.ranks()));
  Placement p;
  p.ranks_of.resize(size_t(workers));
  p.worker_of.assign(size_t(logical.ranks()), -1);
  if (k.placement() == ClusterConfig::EXPLICIT) {
    for (int w = 0; w < k.worker_size(); ++w)
      for (int32_t r : k.worker(w).rank()) p.ranks_of[size_t(w)].push_back(r);
  } else {
    const auto order = rank_order(t, k.placement());
    for (int32_t w = 0; w < workers; ++w) {
      const auto chunk = comm::chunk_range(order.size(), workers, w);
      for (size_t i = chunk.begin; i < chunk.end; ++i) p.ranks_of[size_t(w)].push_back(order[i]);
    }
  }
  for (size_t w = 0; w < p.ranks_of.size(); ++w) {
    std::sort(p.ranks_of[w].begin(), p.ranks_of[w].end());
    for (int32_t r : p.ranks_of[w]) p.worker_of[size_t(r)] = int32_t(w);
  }
  // A hosted logical rank lives where its host rank does (the same index in both layouts).
  for (const auto& r : logical.all_ranks())
    p.worker_of[size_t(logical.index(r))] = p.worker_of[size_t(logical.index(logical.host_of(r)))];
  return p;
}

}  // namespace troupe::engine
