// The checkpoint writer actor: one per (dp, pp, tp) rank that writes a shard. Its
// optimizer shard hands it a copy of the shard's state at a save step
// (engine::ShardState, taken while the stage is idle), and training continues while
// the writer writes the shard file into the checkpoint's .partial directory
// (ckpt::ShardWriter: temp name, CRC-32C, fsync, rename). It answers the coordinator
// with the shard's record, which goes into the manifest.
//
// Writers live under their own one_for_one supervisor: a writer that dies marks that
// checkpoint failed (the coordinator is told, and the next save retries).
//
// Runs detached: file I/O blocks.
//
// Messages in: ShardSnapshot (writer_actor, actors/actor_interfaces.h).
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/actor_interfaces.h"
#include "actors/directory.h"
#include "ckpt/flat_layout.h"
#include "engine/faults.h"
#include "engine/shard_copies.h"
#include "engine/topology.h"

namespace troupe::actors {

struct WriterArgs {
  // The writer's piece of the Config: the flat layout of its rank's parameters, which
  // its shard files follow (engine::shard_layout).
  std::shared_ptr<const ckpt::FlatLayout> layout;
  engine::Rank rank;
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<Directory> directory;  // finds the coordinator
  // Where the shard just written is kept in memory (engine/shard_copies.h): the next
  // group start heals a damaged file from it. Null: none kept (cluster workers).
  std::shared_ptr<engine::ShardCopies> copies;
};

writer_actor spawn_writer(caf::event_based_actor* parent, WriterArgs args);

}  // namespace troupe::actors
