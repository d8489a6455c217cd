// The training group as declared supervision: coordinator, data loaders, stages and
// optimizer shards of one run under one supervisor (strategy and intensity from the
// config's supervision section; data loaders restart alone). The children start in
// the order loaders, optimizer shards, stages, coordinator; once all have started,
// the coordinator receives the registry and wires the group.
//
// When a member other than a loader fails: every communicator of the group is
// aborted (no surviving stage waits in a collective for it), hung actors are
// released, the failure is recorded, and the next start of the group resumes from
// the newest complete checkpoint (engine::ResumeSource).
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/cluster/cluster.h"
#include "actors/directory.h"
#include "actors/metrics_inbox.h"
#include "actors/run_book.h"
#include "actors/supervision.h"
#include "engine/checkpointing.h"
#include "engine/faults.h"
#include "engine/run_state.h"
#include "engine/state_mirror.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct GroupArgs {
  // The run's one Config: the group cuts each actor's piece from it (docs/runtime.md);
  // the coordinator holds it whole.
  std::shared_ptr<const Config> config;
  engine::RunState run_state;  // the skip list for the loaders and the manifests, where the group resumes
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<Directory> directory;
  std::shared_ptr<RunBook> book;
  std::shared_ptr<engine::ResumeSource> resume;
  std::shared_ptr<MetricsInbox> metrics;  // the run's records (actors/metrics_inbox.h)
  caf::actor client;  // receives finished_atom + RunOutcome
  // Called with the group supervisor's report when it exits.
  std::function<void(const SupervisorReport&)> on_exit;
  // Cluster mode (docs/cluster.md): loaders, stages and optimizer shards are placed on
  // worker processes, their communicators are Gloo groups of generation
  // `comms->current()`; null in one process.
  std::shared_ptr<Cluster> cluster;
  std::shared_ptr<ClusterComms> cluster_comms;
  // The state mirror (engine/state_mirror.h), when supervision.state_mirror is on: the
  // optimizer shards send their state after every update to the process's keeper, the
  // coordinator files each complete step here. Null: off.
  std::shared_ptr<engine::MirrorBook> mirror;
};

SupervisorSpec training_group_spec(GroupArgs args);

// The checkpoint writers: one per rank that writes a shard, one_for_one. A writer
// that dies is restarted and the coordinator is told, so that checkpoint fails.
// In one process each keeps its newest shard in `copies` (engine/shard_copies.h); in
// cluster mode (`cluster` set) each writer lives on the worker hosting its rank.
SupervisorSpec writer_group_spec(std::shared_ptr<const Config> config, std::shared_ptr<engine::FaultPlan> faults,
                                 std::shared_ptr<Directory> directory, std::shared_ptr<RunBook> book,
                                 std::shared_ptr<engine::ShardCopies> copies, std::shared_ptr<Cluster> cluster = nullptr);

// Cluster-mode hooks shared by the training group and the writers: a child whose
// process was lost quarantines that process (moving its ranks to a spare), and no
// restart happens once no spare is left.
void add_cluster_hooks(SupervisorSpec& spec, std::shared_ptr<Cluster> cluster);

// A failure record for a child restarted alone (the phase is read off the reason).
metrics::FailureRecord alone_failure(const std::string& path, const std::string& reason, int64_t max_step);

// Has the child's supervisor ask it for a heartbeat every supervision.heartbeat_interval_s
// and take it for hung after supervision.hang_timeout_s unanswered (0: not watched). The
// child answers ping_atom with pong_atom.
void watch_for_hangs(ChildSpec& child, const SupervisionConfig& s);

}  // namespace troupe::actors
