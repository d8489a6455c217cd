// The data loader actor: one per data-parallel replica. It streams the replica's
// training microbatches, step after step from where the run starts, to every stage
// of its replica (one shared handle: nothing is copied), keeping at most
// data.prefetch_microbatches ahead of what the replica's first stage has consumed
// (credit_atom returns one). After the last microbatch of a step it sends the
// replica's counts and sample IDs to the coordinator. Evaluation microbatches are
// produced on request (RunStep with kind Eval), all at once.
//
// Producing a microbatch is a few memcpys from the memory-mapped dataset, so the
// loader is event-based on CAF's shared scheduler.
//
// A loader restarts alone (one_for_one inside its group): the coordinator hands the
// new one the start of the step in flight, and stages drop what they already used.
//
// Messages in: wire_atom + Registry, start_atom (first step, consumed samples, last
// step), credit_atom (step, microbatch), RunStep (Eval): loader_actor
// (actors/actor_interfaces.h).
#pragma once

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

#include "actors/actor_interfaces.h"
#include "data/batch_source.h"
#include "engine/faults.h"
#include "engine/topology.h"
#include "messages/config.pb.h"

namespace troupe::actors {

// What a loader reads of the configuration, cut once per run (LoaderConfig::of) and
// shared by every loader of it.
struct LoaderConfig {
  data::InputSpec input;    // the datasets and the batch's shape (data::BatchSource::open)
  bool evaluates = false;   // training.eval_samples > 0: the validation split is opened
  engine::Topology layout;  // the logical layout: the stages (pp x tp) a replica feeds
  static std::shared_ptr<const LoaderConfig> of(const Config& c);
};

struct LoaderArgs {
  std::shared_ptr<const LoaderConfig> config;
  int32_t dp = 0;
  std::shared_ptr<engine::FaultPlan> faults;
  std::vector<int64_t> skip_samples;  // the run state's (engine/run_state.h): the train split skips them
};

loader_actor spawn_loader(caf::event_based_actor* parent, LoaderArgs args);

}  // namespace troupe::actors
