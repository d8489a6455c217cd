// The layout of one training run as data: which ranks exist, the path of every
// actor, and the communicator groups they share. Paths name actors in logs, metrics
// and fault injection:
//   coordinator, metrics, loader/dp1, stage/dp1/pp0/tp0, optim/dp0/pp1/tp0, writer/dp0/pp1/tp0
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "messages/rank.h"

namespace troupe::comm {
struct GroupSpec;
class OrderedReduction;
}

namespace troupe::engine {

struct HostedStage;  // engine/hosted_stage.h

using troupe::Rank;  // messages/rank.h

// The logical layout (dp, pp, tp), which alone decides the numbers, and the placement of
// its data-parallel replicas (docs/layout.md): `physical` replicas compute the dp logical
// ones, physical replica q hosting logical replicas q, q + physical, q + 2 physical, ...
// (round 0, 1, 2, ...), one after another on one copy of the stage.
struct Topology {
  int32_t dp = 1, pp = 1, tp = 1;
  int32_t physical = 0;  // 0: dp (every logical replica computed by one of its own)

  // The config's logical layout (parallel.data, .pipeline, .tensor), every logical
  // replica computed by one of its own. The placement a group runs on is run state
  // (engine::RunState::topology): only the configuration's own checks and prints read
  // parallel.physical_replicas from the Config.
  static Topology logical(const Config& c);
  // This layout computed by `physical_replicas` physical data-parallel replicas (0: one
  // per logical replica); the logical layout is unchanged.
  Topology placed_on(int32_t physical_replicas) const { return {dp, pp, tp, physical_replicas}; }

  int32_t physical_replicas() const { return physical > 0 ? physical : dp; }
  // Logical replicas each physical one hosts.
  int32_t hosted() const { return dp / physical_replicas(); }
  bool hosts_several() const { return hosted() > 1; }
  // The rank of round 0 on the physical replica that computes r: its stage, device and
  // communicators are the ones r shares.
  Rank host_of(const Rank& r) const { return {r.dp % physical_replicas(), r.pp, r.tp}; }
  // Which of its physical replica's turns r is: 0 for the first logical replica it hosts.
  int32_t round_of(const Rank& r) const { return r.dp / physical_replicas(); }
  // The layout of the physical replicas, (physical_replicas, pp, tp): its ranks are the
  // host ranks (round 0), with the same index() as in this layout.
  Topology physical_layout() const { return {physical_replicas(), pp, tp}; }

  int32_t ranks() const { return dp * pp * tp; }
  // Every rank in (dp, pp, tp) order: the fixed order in which the coordinator sums
  // partial results, so that the sum does not depend on message arrival.
  std::vector<Rank> all_ranks() const;
  int32_t index(const Rank& r) const { return (r.dp * pp + r.pp) * tp + r.tp; }

  bool contains(const Rank& r) const {
    return r.dp >= 0 && r.dp < dp && r.pp >= 0 && r.pp < pp && r.tp >= 0 && r.tp < tp;
  }
  bool first_stage(const Rank& r) const { return r.pp == 0; }
  bool last_stage(const Rank& r) const { return r.pp == pp - 1; }
};

// The path of a rank's actor of one kind ("stage", "optim", "writer"): KIND/dpD/ppP/tpT.
std::string rank_path(std::string_view kind, const Rank& r);
std::string stage_path(const Rank& r);
std::string optim_path(const Rank& r);
std::string writer_path(const Rank& r);
std::string loader_path(int32_t dp);
// "(dp D, pp P, tp T)": a rank in an error message.
std::string rank_text(const Rank& r);
inline const char* coordinator_path() { return "coordinator"; }
inline const char* metrics_path() { return "metrics"; }
// The writers' supervisor, in the directory so that the coordinator can have a hung
// writer replaced (actors/supervision.h, abandon_atom). Not an actor that faults target.
inline const char* writers_supervisor_path() { return "writers"; }
// The state mirror's keeper of a process (actors/mirror_keeper.h), beside the writers.
inline const char* mirror_keeper_path() { return "mirror"; }

// Every actor path the topology has (for validating fault injection targets).
std::vector<std::string> all_paths(const Topology& t);

// The communicators one stage rank uses.
struct RankComms {
  // The data-parallel group of (pp, tp): gradients reduce-scatter, parameters all-gather.
  std::shared_ptr<comm::Communicator> data_parallel;
  // First and last stage of one (dp, tp) with tied embeddings and pp > 1: the two
  // copies of wte sum their gradients. Null elsewhere.
  std::shared_ptr<comm::Communicator> embedding;
  // The tensor-parallel group of (dp, pp).
  std::shared_ptr<comm::Communicator> tensor_parallel;
  // Pipeline neighbours in another process (cluster mode): stage pp with pp-1 (this
  // rank is member 1) and with pp+1 (member 0). Activations and their gradients go
  // through them when the neighbour lives elsewhere; null in one process, where
  // neighbours hand each other pointers.
  std::shared_ptr<comm::Communicator> pipeline_prev, pipeline_next;
  // Physical replicas hosting several logical ones (Topology::hosts_several): what the
  // hosted ranks of this physical rank share, and its member of the ordered reduction
  // over data_parallel, here the group of the (pp, tp)'s physical replicas
  // (comm/ordered_reduction.h). Every hosted rank gets its round-0 rank's RankComms,
  // whose groups are those of the physical layout. Null otherwise.
  std::shared_ptr<HostedStage> hosted;
  std::shared_ptr<comm::OrderedReduction> ordered_reduction;
};

// The communicator of `r` that member `member` of the layout group `g`
// (comm::layout_groups, whose member indexes are Topology::index) fills.
std::shared_ptr<comm::Communicator>& slot_of(RankComms& r, const comm::GroupSpec& g, int member);

// How long a collective may wait for its peers: somewhat longer than the step
// watchdog (supervision.step_watchdog_s x 1.5 + 1 s; 120 s with the watchdog off), so a
// silent peer is named by the coordinator's watchdog first.
std::chrono::milliseconds collective_timeout(const Config& c);

// In-process communicators for every rank, indexed by Topology::index, and every
// group created (so a supervisor can abort them all when a member dies).
struct CommPlan {
  std::vector<RankComms> ranks;
  std::vector<std::shared_ptr<comm::Communicator>> all_members;
  // The ranks' devices (Topology::index order) when the communicators were made over
  // them (device memory, engine/rank_device.h: make_group_comms); empty otherwise.
  std::vector<std::shared_ptr<kernels::Device>> devices;
  // Physical replicas hosting several logical ones: the ordered reductions (also in the
  // host ranks' RankComms), aborted with the rest.
  std::vector<std::shared_ptr<comm::OrderedReduction>> ordered_reductions;
  void abort_all(const std::string& why) const;
};
CommPlan make_inprocess_comms(const Topology& t, std::chrono::milliseconds timeout);

}  // namespace troupe::engine
