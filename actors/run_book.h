// The record of one run across restarts of its training group: every step of the
// current timeline (with its sample IDs, for the sample audit), evaluations,
// failures and recoveries, and the rollbacks of logging.on_spike ROLLBACK. The coordinator writes it; a restarted coordinator
// rewinds it to the checkpoint it resumes from, so steps redone after a failure are
// marked recomputed and counted apart from new ones. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "actors/run_outcome.h"
#include "engine/rollback.h"

namespace troupe::actors {

class RunBook {
 public:
  // A step finished. It is "recomputed" when an earlier timeline had finished it.
  // Returns the record with `recomputed` and `restarts` filled in.
  metrics::StepRecord add_step(metrics::StepRecord r, std::vector<int64_t> samples,
                               std::vector<msg::StageTiming> timings = {});
  void add_eval(const metrics::EvalRecord& e);
  // Step `step`'s update was decided and the next step went out before it closed
  // (the coordinator runs ahead): should the group fail before `step` closes, its
  // redo still counts as recomputed.
  void step_decided(int64_t step);

  // A failure was seen (a supervisor's on_failure). One that restarts the training
  // group (`group_restart`) starts the recovery clock; a child restarted alone
  // (loader, writer, metrics) is only recorded.
  void failure(const metrics::FailureRecord& f, bool group_restart);
  // The group (re)started from the checkpoint of `step` (0: from scratch): the
  // current timeline drops the steps after it. Returns the number of restarts so far.
  int64_t resume_from(int64_t step);
  // The restarted group's coordinator has wired every member: state reloaded.
  void group_ready();
  // The first step after a restart finished: closes the recovery clock.
  struct Recovery {
    double detection_s = 0;  // the fault fired -> its failure seen by the supervisor (when known)
    double restart_s = 0;    // failure seen -> the group started again (old group stopped)
    double reload_s = 0;     // group started -> every member constructed, checkpoint loaded, wired
    double rewarm_s = 0;     // wired -> the first step after the restart done
    double total_s() const { return detection_s + restart_s + reload_s + rewarm_s; }
  };
  std::optional<Recovery> first_step_done();
  // A restarted group has not finished its first step yet (the recovery clock runs).
  bool recovering() const;
  // When the failure was caused on purpose, the moment the fault fired.
  void fault_fired_at(std::chrono::steady_clock::time_point t);

  int64_t restarts() const;
  double elapsed_seconds() const;  // since the run began
  int64_t recomputed_steps() const;
  int64_t max_step_reached() const;
  std::vector<metrics::FailureRecord> failures() const;
  std::vector<Recovery> recoveries() const;

  // A spike rolled the run back (logging.on_spike ROLLBACK; the checkpoint root already
  // moved back): the group's outcome reads status "rollback" until the run's client,
  // which starts the next group, takes the rollback.
  struct Rollback {
    engine::RollbackRequest request;
    engine::RollbackDone done;
  };
  void rolled_back(const engine::RollbackRequest& r, const engine::RollbackDone& d);
  std::optional<Rollback> take_rollback();
  // Every rollback of the run so far, oldest first.
  std::vector<Rollback> rollbacks() const;
  // Their spike steps (for the cap of logging.rollback_limit), after those of the
  // earlier processes of a resumed run (earlier_rollbacks).
  std::vector<int64_t> rollback_spikes() const;
  // The spike steps of the rollbacks that earlier processes of the run recorded.
  void earlier_rollbacks(std::vector<int64_t> spike_steps);

  // The outcome so far (steps of the current timeline, in order).
  RunOutcome outcome() const;
  void finish(const std::string& status, const std::string& error, const metrics::RunSummary& summary);

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  RunOutcome outcome_;
  int64_t max_step_ = 0;      // the newest step finished by an earlier timeline, or this one
  int64_t decided_step_ = 0;  // the newest step_decided of this timeline
  int64_t restarts_ = 0;
  int64_t recomputed_ = 0;
  std::vector<metrics::FailureRecord> failures_;
  std::vector<Recovery> recoveries_;
  std::vector<Rollback> rollbacks_;
  bool rollback_pending_ = false;  // rollbacks_.back() is still to be carried out
  std::vector<int64_t> earlier_rollback_spikes_;
  std::optional<Clock::time_point> failed_at_, restarted_at_, ready_at_, fired_at_;
  bool awaiting_first_step_ = false;
  const Clock::time_point created_ = Clock::now();
};

}  // namespace troupe::actors
