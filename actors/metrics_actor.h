// The metrics actor: every record of the run goes through it to the console (step
// lines under a header, a progress bar with ETA on a terminal, the final summary),
// to RUN_DIR/metrics.jsonl and to the TensorBoard event file (metrics/ formats all
// three). Records reach it through the run's MetricsInbox (actors/metrics_inbox.h),
// which keeps each until it is written: restarted one_for_one (also after a hang,
// found by its supervisor's heartbeat), it holds nothing that cannot be reopened, and
// a successor writes what its predecessor left, in order, so no record is lost.
//
// Loss spikes go to RUN_DIR/spikes.jsonl (metrics::SpikeDetector, history reloaded on
// restart). At the end it prints the straggler report (per stage: compute and wait
// per microbatch, slowest ranks) and the calendar from the measured throughput.
//
// Records (through the inbox): metrics::StartupRecord, StepRecord, StepExtras,
// EvalRecord, FailureRecord, RunSummary, restart_marker_atom + step + time (a group
// restart: TensorBoard's SessionLog START), event_atom + type + step + time + JSON
// object text (checkpoint saves and failures, recoveries: written to metrics.jsonl).
// Messages: drain_atom (records are waiting), ping_atom (its supervisor's heartbeat):
// metrics_actor (actors/actor_interfaces.h).
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/metrics_inbox.h"
#include "engine/faults.h"
#include "engine/step_close.h"
#include "actors/actor_interfaces.h"
#include "messages/runtime.h"
#include "metrics/run_dir.h"
#include "metrics/spike_detector.h"
#include "sched/planner.h"

namespace troupe::actors {

// What the coordinator knows of a step beyond its record (engine/step_close.h).
using StepExtras = engine::StepExtras;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::engine::StepExtras)

namespace troupe::actors {

struct MetricsArgs {
  metrics::RunDirLayout layout;
  bool console = true;       // step lines and the summary on stdout
  bool progress_bar = true;  // only drawn when stdout is a terminal
  bool tensorboard = true;
  int32_t log_interval = 1;  // print every n-th step line
  int64_t total_steps = 0;
  std::shared_ptr<engine::FaultPlan> faults;
  // What the metrics actor reads of the configuration besides the above.
  metrics::SpikeOptions spikes;        // logging.spike_window, _min_history, _mad_k, _*_min_jump
  int64_t max_unwritten_records = 0;   // logging.max_unwritten_records
  sched::TokenPlan tokens;             // the calendar line's token budget (sched::token_plan)
  double calendar_efficiency = 1;      // logging.calendar_efficiency
  std::shared_ptr<MetricsInbox> inbox;  // the run's records, shared by every incarnation
  // Where the coordinator is found: told when records pile up unwritten (a full disk).
  std::shared_ptr<Directory> directory;
};

metrics_actor spawn_metrics(caf::event_based_actor* parent, MetricsArgs args);

}  // namespace troupe::actors
