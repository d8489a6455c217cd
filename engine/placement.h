// Which worker process hosts which ranks (cluster mode, docs/cluster.md), from the
// config's cluster section, without actors. Active workers are numbered 0..workers-1
// in the order they are given ranks; the supervisor maps them to the worker processes
// that joined (and to a spare after a loss).
//
// A worker hosts, for each rank placed on it, the rank's stage, optimizer shard and
// checkpoint writer; the data loader of replica d goes with the replica's first stage
// (rank (d, 0, 0)).
#pragma once

#include <cstdint>
#include <vector>

#include "config/validate.h"
#include "engine/topology.h"
#include "messages/config.pb.h"

namespace troupe::engine {

// cluster.workers > 0: the run spans worker processes.
bool cluster_mode(const Config& c);

struct Placement {
  // ranks_of[w]: the global rank indices (Topology::index) active worker w hosts,
  // ascending: with physical replicas hosting several logical ones
  // (parallel.physical_replicas), the host ranks, one device each (docs/layout.md).
  std::vector<std::vector<int32_t>> ranks_of;
  // worker_of[index]: the active worker hosting logical rank `index` (a hosted rank's is
  // its host rank's).
  std::vector<int32_t> worker_of;

  int32_t workers() const { return int32_t(ranks_of.size()); }
  // The active worker hosting replica d's data loader (the worker of rank (d, 0, 0)).
  int32_t loader_worker(const Topology& t, int32_t d) const { return worker_of[size_t(t.index({d, 0, 0}))]; }
};

// Which worker hosts which ranks of `placed` (the logical layout on its placement of
// data-parallel replicas, engine::RunState::topology), as the cluster section asks.
// Requires cluster_violations(c) to be empty; throws std::invalid_argument otherwise.
Placement placement_of(const Config& c, const Topology& placed);
// The same over `workers` active workers instead of cluster.workers (a shrink onto the
// workers still alive; not with placement EXPLICIT, whose lists name the configured ones).
Placement placement_of(const Config& c, const Topology& placed, int32_t workers);

// Every broken rule of the cluster section (and of faults that need it), reported
// against the field it concerns, e.g. {"cluster.worker[1].rank[0]", "rank 3 is placed
// twice (also on worker 0)"}. Empty in local mode when the section is unused.
std::vector<config::Violation> cluster_violations(const Config& c);

// Throws config::ConfigError describing the first violation (with where it was set).
void validate_cluster(const Config& c, const config::Origins& origins);

}  // namespace troupe::engine
