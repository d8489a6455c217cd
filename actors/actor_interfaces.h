// The training actors' interfaces as types (CAF 0.17 typed_actor): what each actor
// accepts, and what it answers to a request. A message sent to an actor whose
// interface does not list it fails to compile ("receiver does not accept given
// message") instead of being printed and dropped at run time by CAF's default
// handler. The message structs are messages/runtime.h; the atoms are
// actors/message_types.h and actors/metrics_inbox.h (this header is the CAF side of
// the messages, included only by actors/ and what builds on it).
//
// Messages an actor sends itself (tick_atom, deliver_atom) or gets from its own
// device's when_done (actors/send_when_done.h: grads_on_host_atom, ...) are in its
// interface too: CAF 0.17 checks a typed actor's sends to itself against its own
// interface as well.
//
// Where the handles stay untyped, and why (the casts between the two worlds are
// typed_handle and untyped_handle below, nowhere else):
// - The supervision tree (actors/supervision.h) holds children of every kind:
//   ChildSpec::start returns caf::actor, the Registry maps paths to caf::actor, the
//   Directory holds caf::actor. A start function wraps its spawn_* in untyped_handle;
//   an actor finds its group's peers in the Registry by role through Peers
//   (actors/peers.h: typed, and a missing path named at the lookup), and wraps what
//   the Directory holds in typed_handle with the peer's interface.
// - Cluster mode: a worker's host actor answers PlaceActor with the placed actor as a
//   caf::actor (actors/cluster/cluster_protocol.h, worker_host.cpp; place_on_worker returns
//   it as a start function's result), and handles cross processes inside the
//   Registry (registered for the wire as a map of caf::actor, actors/cluster/wire_types.cpp),
//   loader_atom, rejoin_atom and PeerHandles. They stay caf::actor on the wire, so
//   that one registered type carries every kind of actor, and are cast on arrival
//   like a Registry entry. The cluster's own actors (host, registrar, store, link
//   watch) keep their untyped handles.
// - The supervisors stay untyped. The run's client is a scoped_actor (blocking actors
//   are untyped in CAF 0.17); the coordinator holds it as run_client, cast once.
#pragma once

#include <caf/all.hpp>

#include "actors/cluster/cluster_protocol.h"
#include "actors/message_types.h"
#include "actors/metrics_inbox.h"

namespace troupe::actors {

// The metrics actor (actors/metrics_actor.h): records arrive through the MetricsInbox;
// a message only wakes it.
using metrics_actor = caf::typed_actor<caf::reacts_to<drain_atom>,                   // records are waiting
                                       caf::replies_to<ping_atom>::with<pong_atom>>;  // its supervisor's heartbeat

// A checkpoint writer (actors/writer_actor.h): its optimizer shard's copy to write.
using writer_actor = caf::typed_actor<caf::reacts_to<msg::ShardSnapshot>>;

// The state mirror's keeper of this process (actors/mirror_keeper.h): an optimizer
// shard's state after an update; in cluster mode, through the worker's host, its buddy,
// a buddy's copy to hold, and a fetch of a held shard (actors/cluster/cluster_protocol.h).
using mirror_keeper_actor = caf::typed_actor<caf::reacts_to<msg::MirrorSnapshot>, caf::reacts_to<MirrorBuddy>,
                                             caf::replies_to<MirrorCopy>::with<mirror_held_atom>,
                                             caf::replies_to<MirrorFetch>::with<std::string>>;

// A data loader (actors/loader_actor.h).
using loader_actor = caf::typed_actor<
    caf::replies_to<wire_atom, Registry>::with<wired_atom>,  // the coordinator wires the group
    caf::reacts_to<start_atom, int64_t, int64_t, int64_t>,   // first step, consumed samples, last step
    caf::reacts_to<credit_atom, int64_t, int32_t>,           // its first stage consumed (step, microbatch)
    caf::reacts_to<msg::RunStep>>;                           // an evaluation pass's microbatches

// A pipeline stage (actors/stage_actor.h).
using stage_actor = caf::typed_actor<
    caf::replies_to<wire_atom, Registry>::with<wired_atom>,  // the coordinator wires the group
    caf::reacts_to<msg::RunStep>,                            // the coordinator: a step to run
    caf::reacts_to<msg::MicrobatchReady>,                    // its loader
    caf::reacts_to<loader_atom, caf::actor>,                 // the coordinator: its loader restarted
    caf::reacts_to<msg::ActivationsReady>,                   // the previous stage (forward)
    caf::reacts_to<msg::GradientsReady>,                     // the next stage (backward)
    caf::reacts_to<eval_consumed_atom, int64_t, int32_t, int32_t>,  // the next stage: an evaluation slot (step, mb, chunk) is free
    caf::reacts_to<msg::ShardApplied>,                       // its optimizer shard
    caf::reacts_to<grads_on_host_atom, int64_t>,             // its device's when_done (host-staged
    caf::reacts_to<params_on_host_atom, int64_t>,            // collectives)
    caf::reacts_to<turn_atom, int64_t>,                      // a stage of its physical rank: its turn (hosted replicas)
    caf::reacts_to<reduced_atom, int64_t>,                   // its physical rank's last round: the sums are in
    caf::replies_to<snapshot_atom>::with<engine::StageSnapshot>>;  // tests: a copy of its weights

// An optimizer shard (actors/optimizer_actor.h).
using optimizer_actor = caf::typed_actor<
    caf::replies_to<wire_atom, Registry>::with<wired_atom>,  // the coordinator wires the group
    caf::reacts_to<msg::GradShardReady>,                     // its stage: the step's gradients
    caf::reacts_to<msg::UpdateCommand>,                      // the coordinator: the update
    caf::reacts_to<norm_summed_atom, int64_t, double>,       // its device's when_done: its partial, when it decides
    caf::reacts_to<msg::SnapshotCommand>,                    // the coordinator: copy for a save
    caf::reacts_to<snapshot_landed_atom, int64_t>,           // its device's when_done: the copies landed
    caf::reacts_to<deliver_atom, msg::ShardSnapshot, int64_t>,  // itself: a writer being restarted
    caf::reacts_to<mirror_landed_atom, int64_t>,             // its device's when_done: the mirror's copies landed
    caf::replies_to<snapshot_atom>::with<engine::OptimSnapshot>>;  // tests: a copy of its moments

// The coordinator (actors/coordinator_actor.h).
using coordinator_actor = caf::typed_actor<
    caf::reacts_to<wire_atom, Registry>,                             // the group supervisor: the group is up
    caf::reacts_to<rejoin_atom, std::string, caf::actor, Registry>,  // a loader restarted alone
    caf::reacts_to<msg::LossReport>, caf::reacts_to<msg::ReplicaCounts>, caf::reacts_to<msg::NormPartial>,
    caf::reacts_to<msg::StageDone>, caf::reacts_to<msg::Heartbeat>,      // a step's reports
    caf::reacts_to<msg::SnapshotTaken>, caf::reacts_to<msg::ShardWritten>,  // a save's reports
    caf::reacts_to<msg::MirrorKept>,                // the mirror keeper: a shard of a step held in memory
    caf::reacts_to<writer_down_atom, std::string>,  // the writers' supervisor: a writer died
    caf::reacts_to<storage_failed_atom, std::string>,  // the metrics actor: records cannot be written
    caf::reacts_to<tick_atom>,                      // itself: the watchdog and the save deadline
    caf::replies_to<ping_atom>::with<pong_atom>>;   // its supervisor's heartbeat

// The run's client as the coordinator sees it: run_training's scoped_actor, which
// waits for the end (a blocking actor, untyped: CoordinatorArgs::client is cast once).
using run_client = caf::typed_actor<caf::reacts_to<finished_atom, RunOutcome>>;

// Between the untyped supervision tree and typed handles (see above). actor_cast
// does not check the interface: the caller names the actor's interface by the path it
// looked it up under.
template <class Interface>
Interface typed_handle(const caf::actor& a) {
  return caf::actor_cast<Interface>(a);
}
template <class Interface>
caf::actor untyped_handle(const Interface& a) {
  return caf::actor_cast<caf::actor>(a);
}

}  // namespace troupe::actors
