// The coordinator: drives steps. It wires the training group (hands every member the
// registry and waits for each to answer), starts the loaders' streams, then for each
// step sends RunStep to every stage, collects loss reports, replica counts and norm
// partials, forms the global gradient norm, decides clip factor, skip and learning
// rate (optim::decide, sched::LrSchedule: the schedule advances only on successful
// updates; consumed samples advance always), sends UpdateCommand to every optimizer
// shard, and once every stage has reported StageDone publishes the step's record to
// the metrics actor. Every eval_interval steps (and at the end) it runs the
// validation set forward-only through the same pipeline.
//
// All sums over reports run in a fixed rank order (engine::StepLedger), so the
// result never depends on which message arrived first.
//
// Event-based: it does no compute. When training is over (or interrupted) it sends
// finished_atom + RunOutcome to the run's client.
//
// Messages in: wire_atom + Registry (from the group supervisor), LossReport,
// ReplicaCounts, NormPartial, StageDone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "engine/faults.h"
#include "messages/config.pb.h"
#include "actors/run_outcome.h"

namespace troupe::actors {

struct CoordinatorArgs {
  Config config;
  std::shared_ptr<engine::FaultPlan> faults;
  caf::actor metrics;  // may be invalid (no metrics)
  caf::actor client;   // receives finished_atom + RunOutcome
};

caf::actor spawn_coordinator(caf::event_based_actor* parent, CoordinatorArgs args);

// Set by SIGINT / SIGTERM handlers; the coordinator stops after the current step.
void request_stop(int signal_number);
int stop_signal();  // 0 when no stop was requested

}  // namespace troupe::actors
