// The training group as declared supervision: coordinator, data loaders, stages and
// optimizer shards of one run under one supervisor (strategy and intensity from the
// config's supervision section). The children start in the order loaders,
// optimizer shards, stages, coordinator; once all have started, the coordinator
// receives the registry and wires the group. When a member fails, every communicator
// of the group is aborted first, so no surviving stage waits forever in a collective.
#pragma once

#include <memory>

#include <caf/all.hpp>

#include "actors/supervision.h"
#include "engine/faults.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct GroupArgs {
  Config config;
  std::shared_ptr<engine::FaultPlan> faults;
  caf::actor metrics;  // may be invalid
  caf::actor client;   // receives finished_atom + RunOutcome
  // Called with the group supervisor's report when it exits.
  std::function<void(const SupervisorReport&)> on_exit;
};

SupervisorSpec training_group_spec(GroupArgs args);

}  // namespace troupe::actors
