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

#include "actors/directory.h"
#include "engine/faults.h"
#include "engine/shard_copies.h"
#include "engine/topology.h"
#include "actors/actor_interfaces.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct WriterArgs {
  // The run's one Config, shared by every actor of the run (never copied per actor).
  std::shared_ptr<const Config> config;
  engine::Rank rank;
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<Directory> directory;  // finds the coordinator
  // Where the shard just written is kept in memory (engine/shard_copies.h): the next
  // group start heals a damaged file from it. Null: none kept (cluster workers).
  std::shared_ptr<engine::ShardCopies> copies;
};

writer_actor spawn_writer(caf::event_based_actor* parent, WriterArgs args);

}  // namespace troupe::actors
