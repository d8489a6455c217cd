// The coordinator: drives steps. It wires the training group (hands every member the
// registry and waits for each to answer), starts the loaders' streams, then for each
// step sends RunStep to every stage, collects loss reports, replica counts and norm
// partials, forms the global gradient norm, decides clip factor, skip and learning
// rate (optim::decide, sched::LrSchedule: the schedule advances only on successful
// updates; consumed samples advance always), sends UpdateCommand to every optimizer
// shard (and, when nothing else can follow, the next RunStep at once: stages start it
// when their update is applied), and once every stage has reported StageDone
// publishes the step's record to the metrics actor. Every eval_interval steps (and at the end) it runs the
// validation set forward-only through the same pipeline.
//
// Checkpoints: at a save step (checkpoint.interval_steps / interval_seconds, the end
// of a clean run, SIGTERM) it opens the checkpoint's .partial directory, has every
// optimizer shard copy its state to its writer, goes on training as soon as the
// copies are taken, and commits the manifest (then `latest`) once every writer has
// written its shard. One checkpoint is in flight at a time.
//
// Liveness: stages send a Heartbeat after an op (at most one per
// supervision.heartbeat_interval_s); a step that makes no progress
// for supervision.step_watchdog_s fails the coordinator with the missing reports and
// the last heartbeat of each silent actor, and the training group restarts.
//
// All sums over reports run in a fixed rank order (engine::StepLedger), so the
// result never depends on which message arrived first.
//
// What follows what (running ahead, when to save and whether a step waits for it,
// evaluations, stops, the final save's retry) is decided by engine::StepDriver
// (engine/step_driver.h): this actor turns messages into its events and its actions
// into messages, and keeps the data (ledger, decision, the checkpoint's commit).
//
// Event-based: it does no compute. When training is over (or interrupted) it sends
// finished_atom + RunOutcome to the run's client.
//
// Messages in: wire_atom + Registry (from the group supervisor), rejoin_atom,
// LossReport, ReplicaCounts, NormPartial, StageDone, Heartbeat, SnapshotTaken,
// ShardWritten, writer_down_atom, tick_atom, ping_atom: coordinator_actor
// (actors/actor_interfaces.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/directory.h"
#include "actors/metrics_inbox.h"
#include "actors/run_book.h"
#include "actors/run_outcome.h"
#include "actors/actor_interfaces.h"
#include "ckpt/reader.h"
#include "engine/faults.h"
#include "engine/state_mirror.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct CoordinatorArgs {
  // The run's one Config, whole: every manifest records it, and the step driver, the
  // update decision and the checkpoint budget read their parts of it.
  std::shared_ptr<const Config> config;
  engine::Topology topo;  // the group's logical layout on its placement: its ranks, every manifest's placement
  std::vector<int64_t> skip_samples;  // the run state's (engine/run_state.h): the data order, every manifest's list
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<Directory> directory;  // metrics, checkpoint writers
  std::shared_ptr<RunBook> book;
  std::shared_ptr<MetricsInbox> metrics;           // records for the metrics actor
  std::shared_ptr<const ckpt::Checkpoint> resume;  // null: from the initial weights
  caf::actor client;                               // receives finished_atom + RunOutcome
  // Cluster mode: whether a larger placement is ready (a worker joined while the run is
  // placed on fewer physical replicas than configured), asked at each step's close; the
  // group then ends with a checkpoint of that step and the status "regroup" (the runtime
  // starts the next group on the larger placement). Null: never.
  std::function<bool()> larger_placement_ready;
  // The state mirror (engine/state_mirror.h), when supervision.state_mirror is on: each
  // step whose every shard the keepers hold (msg::MirrorKept of `mirror_timeline`) is
  // filed here with its manifest. Null: off.
  std::shared_ptr<engine::MirrorBook> mirror;
  int64_t mirror_timeline = 0;
};

coordinator_actor spawn_coordinator(caf::event_based_actor* parent, CoordinatorArgs args);

// Set by the SIGINT / SIGTERM / SIGHUP handlers; the coordinator stops after the current
// step (with a final checkpoint on SIGTERM and SIGHUP when checkpoint.save_on_exit).
void request_stop(int signal_number);
int stop_signal();  // 0 when no stop was requested
void clear_stop();

}  // namespace troupe::actors
