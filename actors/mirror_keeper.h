// The state mirror's keeper (engine/state_mirror.h, supervision.state_mirror): one per
// process that runs optimizer shards, outside the training group (under the writers'
// supervisor), so that what it holds outlives a restart of the group.
//
// After every update each optimizer shard that writes a checkpoint shard sends its state
// (MirrorSnapshot). The keeper serializes it as the bytes of the shard file a save would
// write, keeps them in the process's MirrorStore and tells the coordinator the shard's
// record (MirrorKept), from which the coordinator files the step's manifest once every
// shard of it is in. Runs detached, at nice 10 (below the compute threads): a mirror
// that lags gives an older step to resume from.
//
// In cluster mode every worker has one (spawned by its host, actors/cluster/worker_host.h)
// that also sends each shard's bytes to its buddy's keeper (MirrorCopy), holds its buddy's
// copies, and hands out what it holds to a worker placing a rank restarted from the
// mirror (MirrorFetch).
//
// Messages in: MirrorSnapshot, MirrorBuddy, MirrorCopy, MirrorFetch (mirror_keeper_actor,
// actors/actor_interfaces.h).
#pragma once

#include <functional>
#include <memory>

#include <caf/all.hpp>

#include "actors/actor_interfaces.h"
#include "actors/directory.h"
#include "actors/supervision.h"
#include "ckpt/flat_layout.h"
#include "engine/state_mirror.h"
#include "engine/topology.h"

namespace troupe::actors {

struct MirrorKeeperArgs {
  // The flat layout of a rank's parameters, which its shard bytes follow (the writers'
  // piece of the Config, engine::shard_layout).
  std::function<ckpt::FlatLayout(const engine::Rank&)> layout_of;
  std::shared_ptr<engine::MirrorStore> store;
  std::shared_ptr<Directory> directory;  // finds the coordinator
  // Cluster mode: this worker's id (0: one process). After keeping a shard the keeper
  // sends a copy to its buddy (MirrorBuddy, from the supervisor at each start of the
  // training group: the next active worker) and reports the workers that hold it.
  int32_t worker_id = 0;
};

mirror_keeper_actor spawn_mirror_keeper(caf::event_based_actor* parent, MirrorKeeperArgs args);

// The keeper as a child of the writers' supervisor (restarted alone; the store outlives it).
ChildSpec mirror_keeper_child(std::shared_ptr<const Config> config, std::shared_ptr<engine::MirrorStore> store,
                              std::shared_ptr<Directory> directory);

}  // namespace troupe::actors
