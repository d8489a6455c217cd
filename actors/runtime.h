// Running a training job: the one entry point behind `supervisor run` and the
// runtime's tests. It prepares the data and the run directory, starts the actor
// system with the supervision tree (root supervisor -> metrics, training group),
// waits until the coordinator reports the end (or the group gives up), optionally
// collects the final training state from the actors, and shuts everything down in
// order. In cluster mode it first listens for the worker processes and waits for
// them; the tree is the same, with the loaders, stages, optimizer shards and writers
// placed on the workers (docs/cluster.md).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "actors/cluster/cluster_root.h"
#include "actors/coordinator_actor.h"
#include "actors/run_book.h"
#include "actors/supervision.h"
#include "engine/state_snapshot.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct RunOptions {
  bool console = true;          // startup block, step lines and summary on stdout
  bool collect_state = false;   // copy weights and Adam moments out at the end
  std::string config_source;    // for the startup block ("" = embedded default)
  // Where model.hidden_dropout and attention_dropout were set (config::Origins; the
  // startup block names it, e.g. Megatron-LM's default on an imported fragment).
  std::string dropout_origin;
  std::string config_text;      // copied into the run directory
  // Upper bound on the whole run; past it the run is stopped and reported failed.
  std::chrono::seconds timeout{std::chrono::hours(24 * 365)};
  // Cluster mode (config cluster.workers > 0, docs/cluster.md): listen here for the
  // worker processes and place the ranks on them. Required in cluster mode, refused
  // otherwise.
  std::optional<ClusterOptions> cluster;
};

struct RunResult {
  RunOutcome outcome;                       // status, summary, every step record
  std::optional<SupervisorReport> failure;  // set when the training group gave up
  std::optional<engine::NamedState> state;  // with collect_state, after the last step
  std::vector<metrics::FailureRecord> failures;  // every failure seen, in order
  int64_t restarts = 0;                          // restarts of the training group
  int64_t recomputed_steps = 0;                  // steps done again after a restart
  std::vector<RunBook::Recovery> recoveries;    // one per restart of the training group
  std::vector<RunBook::Rollback> rollbacks;     // logging.on_spike ROLLBACK, oldest first
  // Cluster mode: every worker that joined (final roles), the quarantine, the first
  // RefusalLog::kKept refusals and how many there were in all.
  std::vector<WorkerRecord> workers;
  std::vector<QuarantineRecord> quarantine;
  std::vector<Refusal> refusals;
  int64_t refusals_total = 0;
  int exit_code() const;                    // 0 completed, 128 + signal when stopped (130/143/129 on SIGINT/SIGTERM/SIGHUP), 1 failed
};

RunResult run_training(const Config& config, const RunOptions& options = {});

// Prints the startup block: config summary, optimizer settings, parameter groups
// by name and count, topology with every actor path.
void print_startup(const Config& config, const std::string& source, const std::string& dropout_origin = "");

}  // namespace troupe::actors
