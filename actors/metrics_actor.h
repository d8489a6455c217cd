// The metrics actor: every record of the run goes through it to the console (step
// lines under a header, a progress bar with ETA on a terminal, the final summary),
// to RUN_DIR/metrics.jsonl and to the TensorBoard event file (metrics/ formats all
// three). Restarted one_for_one: it holds nothing that cannot be reopened, and a
// restarted one first writes the step records its predecessor lost (those that died
// with it or were sent while it was away) from the run book.
//
// Loss spikes go to RUN_DIR/spikes.jsonl (metrics::SpikeDetector, history reloaded on
// restart). At the end it prints the straggler report (per stage: compute and wait
// per microbatch, slowest ranks) and the calendar from the measured throughput.
//
// Messages in: metrics::StartupRecord, StepRecord, StepExtras, EvalRecord, FailureRecord,
// RunSummary, event_atom + type + step + JSON object text (checkpoint saves,
// recoveries: written to metrics.jsonl and logged).
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/run_book.h"
#include "engine/faults.h"
#include "messages/config.pb.h"
#include "messages/runtime.h"
#include "metrics/run_dir.h"
#include "metrics/spike_detector.h"

namespace troupe::actors {

// What the coordinator knows of a step beyond its record: microbatch losses and
// samples (spike records) and every stage's op timings (straggler report).
struct StepExtras {
  metrics::StepDetail detail;
  std::vector<std::string> stage_paths;   // rank order
  std::vector<msg::StageTiming> timings;  // rank order
};

struct MetricsArgs {
  metrics::RunDirLayout layout;
  bool console = true;       // step lines and the summary on stdout
  bool progress_bar = true;  // only drawn when stdout is a terminal
  bool tensorboard = true;
  int32_t log_interval = 1;  // print every n-th step line
  int64_t total_steps = 0;
  std::shared_ptr<engine::FaultPlan> faults;
  Config config;  // spike options, token budget and calendar efficiency
  // The run's book, and whether this is a restart: a restarted metrics actor writes
  // the step records its predecessor lost (see metrics_actor.cpp, catch_up).
  std::shared_ptr<RunBook> book;
  bool restarted = false;
};

caf::actor spawn_metrics(caf::event_based_actor* parent, MetricsArgs args);

}  // namespace troupe::actors
