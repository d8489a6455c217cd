// The state mirror's keeper (engine/state_mirror.h, supervision.state_mirror): one per
// process that runs optimizer shards, outside the training group (under the writers'
// supervisor), so that what it holds outlives a restart of the group.
//
// After every update each optimizer shard that writes a checkpoint shard sends its state
// (MirrorSnapshot). The keeper serializes it as the bytes of the shard file a save would
// write, keeps them in the process's MirrorStore and tells the coordinator the shard's
// record (MirrorKept), from which the coordinator files the step's manifest once every
// shard of it is in. Runs detached, at normal priority: a mirror that lags gives an
// older step to resume from.
//
// Messages in: MirrorSnapshot (mirror_keeper_actor, actors/actor_interfaces.h).
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
};

mirror_keeper_actor spawn_mirror_keeper(caf::event_based_actor* parent, MirrorKeeperArgs args);

// The keeper as a child of the writers' supervisor (restarted alone; the store outlives it).
ChildSpec mirror_keeper_child(std::shared_ptr<const Config> config, std::shared_ptr<engine::MirrorStore> store,
                              std::shared_ptr<Directory> directory);

}  // namespace troupe::actors
