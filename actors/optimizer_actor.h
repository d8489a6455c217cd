// The optimizer shard actor: one (dp, pp, tp) rank of the distributed optimizer. It
// owns an engine::OptimizerShard (fp32 Adam moments of the flat range of its stage
// that its data-parallel rank owns). Per step: GradShardReady from its stage ->
// NormPartial to the coordinator -> UpdateCommand from the coordinator -> AdamW on
// its range (unless skipped) -> ShardApplied to its stage.
//
// Runs detached: the update is compute. It computes on its stage's device (the rank
// device, engine/rank_device.h: the two never compute at once), or on one of its own
// when spawned alone; AdamW and the sum of squares give the same bits either way.
//
// At a save step the coordinator asks for a copy of the shard (SnapshotCommand):
// parameters of its range and both moments, handed to its checkpoint writer. A writer
// being restarted (absent from the directory) is waited for up to the step watchdog;
// past it the shard's write is reported failed (ShardWritten) and the next save retries.
//
// With the state mirror on (supervision.state_mirror, engine/state_mirror.h) it also
// copies that state after every update and sends it to its process's mirror keeper
// (MirrorSnapshot); while the previous copy is still on its way the step is not
// mirrored (the mirror lags by a step; no copy piles up).
//
// Messages in: wire_atom + Registry, GradShardReady, UpdateCommand, SnapshotCommand,
// snapshot_atom (-> OptimSnapshot): optimizer_actor (actors/actor_interfaces.h).
#pragma once

#include <memory>
#include <optional>

#include <caf/all.hpp>

#include "actors/actor_interfaces.h"
#include "actors/directory.h"
#include "ckpt/reader.h"
#include "engine/faults.h"
#include "engine/topology.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/param_registry.h"
#include "optim/adamw.h"

namespace troupe::actors {

// What an optimizer shard reads of the configuration, cut once per run
// (OptimizerConfig::of) and shared by every shard of it.
struct OptimizerConfig {
  optim::AdamWHyper adamw;     // optimizer.beta1, beta2, eps, weight_decay
  bool distributed = true;     // parallel.distributed_optimizer: replica d owns 1/DP of the range
  int32_t data_parallel = 1;   // parallel.data (logical replicas)
  double step_watchdog_s = 0;  // supervision.step_watchdog_s: how long a missing writer is waited for
  static std::shared_ptr<const OptimizerConfig> of(const Config& c);
};

struct OptimizerArgs {
  std::shared_ptr<const OptimizerConfig> config;
  // The rank's parameters: the layer range and tensor-parallel slice of its stage
  // (engine::stage_registry), cut by whoever spawns the shard.
  std::shared_ptr<const model::ParameterRegistry> registry;
  engine::Rank rank;
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<const ckpt::Checkpoint> resume;  // moments and step counter from here
  std::shared_ptr<Directory> directory;             // finds its checkpoint writer
  // The rank's device, shared with its stage (engine/rank_device.h).
  std::shared_ptr<kernels::Device> device;
  // A physical rank hosting several logical ones: the hosted optimizer shards share its
  // device and take its device_turn across each computation (engine/hosted_stage.h).
  std::shared_ptr<engine::HostedStage> hosted;
  // The state mirror's timeline (engine::MirrorStore::timeline) when it is on; none: off.
  std::optional<int64_t> mirror_timeline;
};

optimizer_actor spawn_optimizer(caf::event_based_actor* parent, OptimizerArgs args);

}  // namespace troupe::actors
