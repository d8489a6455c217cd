// The stage actor: one (dp, pp, tp) rank of the model. It owns an
// engine::StageWorker (its layers, device and activation slots) and walks its
// pipeline schedule's op list each step, running an op as soon as the inputs it
// needs have arrived: the microbatch from its loader, activations from the previous
// stage (forward), gradients from the next stage (backward). After its last backward
// it reduces gradients over its data-parallel group, hands its shard to its
// optimizer actor, gathers the updated parameters and reports StageDone. A RunStep
// that arrives while a step runs (the coordinator runs ahead) starts right after it.
//
// Runs detached (its own thread): forward, backward and collectives block it, never
// CAF's shared scheduler.
//
// After an op it sends the coordinator a Heartbeat (at most one per
// supervision.heartbeat_interval_s): the step watchdog names a stage whose beats
// stopped.
//
// Neighbours in another process (cluster mode): the output of a forward (or the
// input gradient of a backward) goes to the neighbour through the pipeline-neighbour
// communicator and the message carries only its shape. Over Gloo (a buffered send)
// the receiving stage receives the values as the message arrives; over NCCL (cluster
// mode on GPUs) the send is issued on the device and the receiver issues the receive
// when it runs the op. Neighbours in this process hand each other pointers.
//
// Messages in: wire_atom + Registry, RunStep, MicrobatchReady, ActivationsReady,
// GradientsReady, ShardApplied, loader_atom + actor (its loader was restarted),
// snapshot_atom (-> StageSnapshot): stage_actor (actors/actor_interfaces.h).
#pragma once

#include <functional>
#include <memory>

#include <caf/all.hpp>

#include "ckpt/reader.h"
#include "engine/faults.h"
#include "engine/stage_worker.h"
#include "engine/topology.h"
#include "kernels/device.h"
#include "actors/actor_interfaces.h"

namespace troupe::actors {

struct StageArgs {
  // The stage's piece of the Config (engine::StageSpec::of: its model spec, layers,
  // activation slots, the verified schedule, ...).
  std::shared_ptr<const engine::StageSpec> spec;
  engine::Rank rank;
  engine::Topology topo;  // the group's logical layout on its placement (engine::RunState::topology)
  engine::RankComms comms;
  std::shared_ptr<engine::FaultPlan> faults;
  // The checkpoint the group starts from (null: the config's initial weights).
  std::shared_ptr<const ckpt::Checkpoint> resume;
  // Cluster mode: connects this rank's communicators (blocking, on the stage's own
  // thread as it starts) instead of using `comms`.
  std::function<engine::RankComms()> connect_comms;
  // The rank's device, shared with its optimizer shard (engine/rank_device.h).
  std::shared_ptr<kernels::Device> device;
};

stage_actor spawn_stage(caf::event_based_actor* parent, StageArgs args);

}  // namespace troupe::actors
