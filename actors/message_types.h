// Declares the runtime's message types (messages/runtime.h) to CAF. Those that can
// cross processes in cluster mode are inspectable (actors/cluster/wire_types.h); those that
// carry pointers into a rank's buffers stay in-process only (unsafe: CAF refuses to
// serialize them), which holds because a rank's stage, optimizer shard and writer
// always share a process.
#pragma once

#include <caf/all.hpp>

#include "actors/supervision.h"
#include "actors/cluster/wire_types.h"
#include "messages/runtime.h"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::msg::GradShardReady)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::msg::ShardApplied)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::msg::ShardSnapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::msg::MirrorSnapshot)

namespace troupe::actors {

// Wiring: the coordinator hands every member of the training group the registry of
// its peers (path -> actor); each answers wired_atom once it has looked them up.
using wire_atom = caf::atom_constant<caf::atom("wire")>;
using wired_atom = caf::atom_constant<caf::atom("wired")>;
// loader -> coordinator at start: where its stream of training microbatches begins.
using start_atom = caf::atom_constant<caf::atom("start")>;
// first stage -> its loader: one microbatch consumed, one credit back.
using credit_atom = caf::atom_constant<caf::atom("credit")>;
// coordinator -> the stages of a replica: its loader was restarted (the new handle).
using loader_atom = caf::atom_constant<caf::atom("loader")>;
// training group supervisor -> coordinator: a child restarted alone (path, handle).
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
// writer supervisor -> coordinator: a writer died (its path); its checkpoint fails.
using writer_down_atom = caf::atom_constant<caf::atom("writerdown")>;
// metrics -> coordinator: the run's records cannot be written (why); the run stops as
// failed at the next step boundary (engine::StorageFailed).
using storage_failed_atom = caf::atom_constant<caf::atom("storefail")>;
// coordinator -> metrics: a JSON object for metrics.jsonl (checkpoints, recoveries),
// with its type, step and Unix time.
using event_atom = caf::atom_constant<caf::atom("event")>;
// coordinator -> metrics: the training group restarted from the checkpoint of a step.
using restart_marker_atom = caf::atom_constant<caf::atom("restartmk")>;
// request -> StageSnapshot / OptimSnapshot copies of the state.
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
// coordinator -> the run's client: training is over (RunOutcome).
using finished_atom = caf::atom_constant<caf::atom("finished")>;
// coordinator -> itself: check for Ctrl-C and the step watchdog.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
// optimizer -> itself: hand a snapshot to its writer, which is being restarted.
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;
// stage -> itself, from its device's when_done: the host copy of what a collective
// step reads has landed (GPU devices; engine/stage_worker.h, stages_collectives).
using grads_on_host_atom = caf::atom_constant<caf::atom("gradshost")>;
using params_on_host_atom = caf::atom_constant<caf::atom("paramshost")>;
// stage p+1 -> stage p (one process), from p+1's device's when_done, evaluation only:
// p+1's device has copied microbatch mb's activations out of p's output slot (step, mb).
using eval_consumed_atom = caf::atom_constant<caf::atom("evalused")>;
// optimizer -> itself, from its device's when_done: its norm partial is on the host
// (step, sum of squares), when it decides the update itself (msg::UpdateRule).
using norm_summed_atom = caf::atom_constant<caf::atom("normsummed")>;
// Logical replicas hosted by one physical replica (parallel.physical_replicas < data),
// stage -> stage of the same physical rank: its turn on the shared stage, for the
// sender's n-th step (RunStep) counted from the group's start: from round j to round j + 1
// once round j's ops are done, and from the last round to round 0 once the step is over.
using turn_atom = caf::atom_constant<caf::atom("turn")>;
// the last round -> the earlier rounds of its physical rank: the step's data-parallel
// sums are in the shared gradient buffer (step).
using reduced_atom = caf::atom_constant<caf::atom("reduced")>;
// optimizer -> itself, from its device's when_done: a snapshot's host copies landed.
using snapshot_landed_atom = caf::atom_constant<caf::atom("snaplanded")>;
// optimizer -> itself, from its device's when_done: the state mirror's copies landed.
using mirror_landed_atom = caf::atom_constant<caf::atom("mirlanded")>;
// a worker's mirror keeper -> the keeper that sent it a MirrorCopy: the copy is held.
using mirror_held_atom = caf::atom_constant<caf::atom("mirheld")>;

}  // namespace troupe::actors

#include "actors/run_outcome.h"
#include "engine/state_snapshot.h"
#include "metrics/step_record.h"
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::RunOutcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::SupervisorReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::metrics::StartupRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::metrics::StepRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::metrics::EvalRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::metrics::FailureRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::metrics::RunSummary)
