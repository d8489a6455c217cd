#include "engine/step_driver.h"

#include <algorithm>
#include <csignal>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/derived.h"
#include "engine/checkpointing.h"
#include "engine/topology.h"

namespace troupe::engine {

StepDriverConfig step_driver_config(const Config& c) {
  StepDriverConfig d;
  d.total_steps = config::full_updates(c);
  d.microbatches = int32_t(config::microbatches_per_replica(c));
  d.eval_microbatches = int32_t(config::eval_microbatches_per_replica(c));
  d.eval_interval = c.training().eval_interval();
  d.global_batch_size = c.batch().global_batch_size();
  const auto& ck = c.checkpoint();
  d.interval_steps = ck.interval_steps();
  d.interval_seconds = ck.interval_seconds();
  d.max_lag_steps = ck.max_lag_steps();
  d.save_on_exit = ck.save_on_exit();
  d.save_timeout_s = ck.save_timeout_s();
  d.max_failed_saves = ck.max_failed_saves();
  d.shard_decides = shard_decides_updates(c);
  for (const auto& r : Topology::logical(c).all_ranks()) {
    d.optimizers.push_back(optim_path(r));
    if (!writes_shard(c, r)) continue;
    d.writers.push_back(writer_path(r));
    d.optimizer_of_writer[writer_path(r)] = optim_path(r);
  }
  return d;
}

bool shard_decides_updates(const Config& c) {
  return Topology::logical(c).ranks() == 1 && c.logging().on_spike() == LoggingConfig::RECORD;
}

namespace {

std::string describe_run_step(const msg::RunStep& rs) {
  return fmt::format("{} {} consumed {} microbatches {}{}{}", rs.kind == msg::StepKind::Train ? "train" : "eval",
                     rs.step, rs.consumed_samples, rs.microbatches, rs.previous_done_may_wait ? " done-may-wait" : "",
                     rs.update.shard_decides ? " shard-decides" : "");
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::string describe(const StepAction& a) {
  return std::visit(
      Overloaded{
          [](const OpenTrainStep& x) {
            return fmt::format("OpenTrainStep {}{}", x.step,
                               x.run_step ? " RunStep " + describe_run_step(*x.run_step) : std::string(" (went out ahead)"));
          },
          [](const OpenEval& x) { return "OpenEval RunStep " + describe_run_step(x.run_step); },
          [](const SendUpdate& x) { return fmt::format("SendUpdate {}", x.step); },
          [](const SendRunStepAhead& x) {
            return fmt::format("SendRunStepAhead RunStep {} issued_at {:g}", describe_run_step(x.run_step), x.issued_at);
          },
          [](const BeginSave& x) { return fmt::format("BeginSave {}{}", x.step, x.final ? " final" : ""); },
          [](const RetryFinalSave& x) {
            return fmt::format("RetryFinalSave {} attempt {} of {}", x.step, x.attempt, x.attempts);
          },
          [](const ReplaceWriters& x) { return fmt::format("ReplaceWriters {}", fmt::join(x.paths, ", ")); },
          [](const SaveWaitsForWriters& x) { return fmt::format("SaveWaitsForWriters {} writers {}", x.step, x.writers); },
          [](const SaveDeferred& x) { return fmt::format("SaveDeferred {}", x.step); },
          [](const KeepShard& x) { return fmt::format("KeepShard {} bytes {}", x.record, x.bytes); },
          [](const CommitSave&) { return std::string("CommitSave"); },
          [](const SaveFailed& x) {
            return fmt::format("SaveFailed {}{}{}: {}", x.step, x.final ? " final" : "", x.begun ? "" : " not begun",
                               x.error);
          },
          [](const FinishRun& x) { return fmt::format("FinishRun {}{}", x.status, x.error.empty() ? "" : ": " + x.error); },
          [](const RegroupDropped& x) { return fmt::format("RegroupDropped {}", x.step); },
          [](const FinishRunFailed& x) { return fmt::format("FinishRunFailed: {}", x.error); },
          [](const FinishRunFinalSaveFailed& x) {
            return fmt::format("FinishRunFinalSaveFailed {} after {}: {}{}", x.step, x.attempts, x.error,
                               x.stop_reason.empty() ? "" : " (stopped: " + x.stop_reason + ")");
          },
      },
      a);
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Wiring: return "Wiring";
    case Phase::BetweenSteps: return "BetweenSteps";
    case Phase::Training: return "Training";
    case Phase::RunningAhead: return "RunningAhead";
    case Phase::Evaluating: return "Evaluating";
    case Phase::TakingCopies: return "TakingCopies";
    case Phase::WaitingForSave: return "WaitingForSave";
    case Phase::WaitingForWriters: return "WaitingForWriters";
    case Phase::Stopping: return "Stopping";
    case Phase::FinalSave: return "FinalSave";
    case Phase::Finished: return "Finished";
  }
  return "?";
}

StepDriver::StepDriver(StepDriverConfig config, const StepDriverStart& start)
    : cfg_(std::move(config)),
      recovering_(start.recovering),
      step_(start.step),
      consumed_samples_(start.consumed_samples),
      last_save_time_(start.now) {
  if (start.resumed) {
    last_saved_step_ = start.step;
    save_checked_step_ = start.step;
    last_eval_step_ = start.step;  // do not re-run an evaluation the checkpoint's run already had
  }
}

std::vector<StepAction> StepDriver::on(const StepEvent& e, double now) {
  now_ = now;
  Actions out;
  // Once the run has ended nothing follows (no save is in flight then).
  if (phase_ == Phase::Finished && !std::holds_alternative<StopRequested>(e)) return out;
  std::visit([&](const auto& x) { on_event(x, out); }, e);
  return out;
}

bool StepDriver::report_is_early(int64_t step) const {
  const bool train_open = phase_ == Phase::Training || phase_ == Phase::RunningAhead;
  return step == issued_step_ && (!train_open || open_step_ < step);
}

// ---- the rules ------------------------------------------------------------------

// Whether the checkpoint schedule asks for a save at the end of `step`.
bool StepDriver::save_due(int64_t step) const {
  if (step <= last_saved_step_) return false;
  if (cfg_.interval_steps > 0 && step % cfg_.interval_steps == 0) return true;
  return cfg_.interval_seconds > 0 && now_ - last_save_time_ >= cfg_.interval_seconds;
}

// Whether the validation set runs after `step` (every eval_interval steps, and at the end).
bool StepDriver::eval_due(int64_t step) const {
  return cfg_.eval_microbatches > 0 &&
         ((cfg_.eval_interval > 0 && step % cfg_.eval_interval == 0) || step == cfg_.total_steps);
}

// Whether `step` must wait for the checkpoint in flight (it may lag by at most
// max_lag_steps).
bool StepDriver::held_by_save(int64_t step) const {
  return save_ && step > save_->step + std::max(0, cfg_.max_lag_steps);
}

// Whether a training step or an evaluation pass is open.
bool StepDriver::step_open() const {
  return phase_ == Phase::Training || phase_ == Phase::RunningAhead || phase_ == Phase::Evaluating;
}

// What comes after a finished training or evaluation step (or the start, or the end of
// a save waited for). The rules apply in this order.
void StepDriver::advance(Actions& out) {
  if (step_open()) return;
  if (save_ && !save_->snapshots_missing.empty()) return;  // copies being taken: called again after
  // Step n+1 already went out (run_ahead): it runs, whatever else is asked meanwhile.
  const bool issued = issued_step_ == step_ + 1;
  // The run cannot keep what it writes (max_failed_saves, records that cannot be
  // written): it ends as failed once the save in flight has ended. No final save: the
  // storage it would go to is what failed.
  if (!fatal_error_.empty() && !issued) {
    finish_or_wait_for_save(out);  // FinishRunFailed once no save is in flight
    return;
  }
  // 0. A spike that rolls the run back: the run of this group ends once the save in
  //    flight has (nothing went out ahead of the step, UpdateDecided saw to that).
  if (rollback_step_ >= 0 && step_ >= rollback_step_) {
    finish_status_ = "rollback";
    finish_error_ = fmt::format("step {} is a spike (logging.on_spike ROLLBACK)", rollback_step_);
    finish_or_wait_for_save(out);
    return;
  }
  // 1. A stop: a final save (SIGTERM or SIGHUP with save_on_exit, when the step is not
  //    saved yet), then the end.
  if (stop_signal_ && !issued) {
    finish_status_ = "interrupted";
    finish_error_ = fmt::format("signal {}", stop_signal_);
    if ((stop_signal_ == SIGTERM || stop_signal_ == SIGHUP) && cfg_.save_on_exit && step_ > last_saved_step_)
      final_save(out);
    else
      finish_or_wait_for_save(out);
    return;
  }
  // 1b. A regroup (RegroupRequested; not on the last step, which ends the run anyway):
  //     this step's checkpoint, then the end of this group with "regroup". A save in
  //     flight ends first; when this step's own save fails the request is dropped.
  if (regroup_ && !issued && step_ < cfg_.total_steps) {
    if (save_) {
      phase_ = Phase::WaitingForSave;
      return;
    }
    if (step_ == last_saved_step_) {
      finish_status_ = "regroup";
      finish_error_ = fmt::format("step {} saved: the run continues on another placement", step_);
      finish_or_wait_for_save(out);
      return;
    }
    if (regroup_save_step_ != step_) {
      regroup_save_step_ = step_;
      save_checked_step_ = step_;
      begin_save(/*final=*/false, out);
      return;
    }
    regroup_ = false;
    out.push_back(RegroupDropped{step_});
  }
  // 2. The step's checkpoint, decided once per step.
  if (save_checked_step_ != step_) {
    // With max_lag_steps 0 no save may start once step n+1 went out ahead: only a
    // time-based one can fall due after that was decided, and it waits one step. Nor
    // when n+1's shard decides its update: nothing orders the copies before it.
    const bool may_save = !issued || (cfg_.max_lag_steps > 0 && !issued_shard_decides_);
    const bool due = step_ < cfg_.total_steps && save_due(step_);
    if (due && may_save && save_) {
      // Every step the schedule names gets its checkpoint: this one waits for the save
      // in flight to end.
      phase_ = Phase::WaitingForSave;
      return;
    }
    save_checked_step_ = step_;
    if (due && may_save) {
      begin_save(/*final=*/false, out);
      return;
    }
    if (due)
      out.push_back(SaveDeferred{step_, cfg_.max_lag_steps <= 0 ? "max_lag_steps is 0"
                                                                : "the optimizer shard decides its own update"});
  }
  // 3. An evaluation (not once the next step went out).
  if (!issued && last_eval_step_ != step_ && eval_due(step_)) {
    open_eval(out);
    return;
  }
  // 4. The next training step, unless it would trail the save in flight too far.
  if (step_ < cfg_.total_steps) {
    if (held_by_save(step_ + 1)) {
      phase_ = Phase::WaitingForSave;
      return;
    }
    open_train_step(out);
    return;
  }
  // 5. The end: the last step is saved with save_on_exit, and when interval_steps names it.
  finish_status_ = "completed";
  const bool interval_step = cfg_.interval_steps > 0 && step_ % cfg_.interval_steps == 0;
  if ((cfg_.save_on_exit || interval_step) && step_ > last_saved_step_)
    final_save(out);
  else
    finish_or_wait_for_save(out);
}

// Right after step n's update is decided: when nothing but step n+1 can follow n (no
// evaluation, no end, no stop asked, no checkpoint in flight that n+1 would have to
// wait for), its RunStep goes out now, and each stage starts it as soon as its part of
// n's update is applied. A checkpoint of step n does not hold n+1 back unless
// max_lag_steps is 0: its copies are taken while n+1's forward and backward run (they
// only read the parameters), and before n+1's update, which waits for n+1's ledger
// (SnapshotCommand and UpdateCommand reach each shard in the order they were sent).
// That is why n+1's update is then the coordinator's even where the shard decides the
// others (cfg_.shard_decides): a shard deciding n+1's own update waits for no
// UpdateCommand, and nothing would order its copies of n before it.
// `decided_at` dates the hand-over: no stage can end step n before it, so a step handed
// over ahead runs from n's end exactly, however late the actor's thread gets here.
void StepDriver::run_ahead(int64_t n, double decided_at, Actions& out) {
  const bool no_lag = cfg_.max_lag_steps <= 0;
  if (stop_signal_ || regroup_ || !fatal_error_.empty() || n >= cfg_.total_steps || eval_due(n) || held_by_save(n + 1) ||
      (no_lag && save_due(n)) || issued_step_ != n)
    return;
  issued_step_ = n + 1;
  phase_ = Phase::RunningAhead;
  // A step to be checkpointed closes at once (the save starts at its close, and the next
  // update waits for the save's copies), and so does a restarted group's first step.
  const bool done_may_wait = !save_due(n) && !recovering_;
  // After a step to be saved, the coordinator decides n+1's update (above).
  issued_shard_decides_ = cfg_.shard_decides && !save_due(n);
  msg::RunStep rs{n + 1, msg::StepKind::Train, consumed_samples_ + cfg_.global_batch_size, cfg_.microbatches,
                  done_may_wait, {}};
  rs.update.shard_decides = issued_shard_decides_;  // the coordinator adds the rate and clip_grad
  out.push_back(SendRunStepAhead{std::move(rs), decided_at});
}

void StepDriver::open_train_step(Actions& out) {
  const int64_t step = step_ + 1;
  OpenTrainStep a{step, std::nullopt};
  if (issued_step_ != step) {
    // Opened after the close: any save of the step before has its copies taken.
    issued_step_ = step;
    issued_shard_decides_ = cfg_.shard_decides;
    a.run_step = msg::RunStep{step, msg::StepKind::Train, consumed_samples_, cfg_.microbatches,
                              /*previous_done_may_wait=*/false, {}};
    a.run_step->update.shard_decides = issued_shard_decides_;  // the coordinator adds the rate and clip_grad
  }
  open_step_ = step;
  phase_ = Phase::Training;
  out.push_back(std::move(a));
}

void StepDriver::open_eval(Actions& out) {
  const int64_t id = ++evals_run_;
  last_eval_step_ = step_;
  phase_ = Phase::Evaluating;
  out.push_back(OpenEval{msg::RunStep{id, msg::StepKind::Eval, 0, cfg_.eval_microbatches,
                                      /*previous_done_may_wait=*/false, /*update: none*/ {}}});
}

// Opens the checkpoint of the current step; every shard is to copy its state.
void StepDriver::begin_save(bool final, Actions& out) {
  if (!writers_replaced_.empty()) {
    out.push_back(SaveWaitsForWriters{step_, writers_replaced_.size()});
    deferred_save_final_ = final;
    phase_ = Phase::WaitingForWriters;
    return;
  }
  if (final) ++final_attempts_;
  Save s;
  s.step = step_;
  s.final = final;
  s.started = now_;
  s.snapshots_missing.insert(cfg_.optimizers.begin(), cfg_.optimizers.end());
  s.shards_missing.insert(cfg_.writers.begin(), cfg_.writers.end());
  save_ = std::move(s);
  phase_ = final ? Phase::FinalSave : Phase::TakingCopies;
  out.push_back(BeginSave{step_, final});
}

// A final checkpoint (end of run, SIGTERM) waits for the one being written.
void StepDriver::final_save(Actions& out) {
  if (save_) {
    phase_ = Phase::Stopping;
    return;
  }
  begin_save(/*final=*/true, out);
}

// Ends the run with finish_status_, once the save in flight (if any) is committed or
// has failed: a checkpoint allowed to trail the steps (max_lag_steps) is never left
// half-written because the steps ran out.
void StepDriver::finish_or_wait_for_save(Actions& out) {
  if (save_) {
    phase_ = Phase::Stopping;
    return;
  }
  if (!fatal_error_.empty())
    out.push_back(FinishRunFailed{fatal_error_});
  else
    out.push_back(FinishRun{finish_status_, finish_error_});
  phase_ = Phase::Finished;
}

// An interval save failed: past max_failed_saves in a row the run stops as failed at the
// next step boundary (a disk that stays full would otherwise fail every save unseen).
void StepDriver::count_failed_save(const std::string& why) {
  ++failed_saves_in_a_row_;
  if (cfg_.max_failed_saves > 0 && failed_saves_in_a_row_ >= cfg_.max_failed_saves && fatal_error_.empty())
    fatal_error_ = fmt::format("{} checkpoint(s) in a row failed (checkpoint.max_failed_saves = {}), the last: {}",
                               failed_saves_in_a_row_, cfg_.max_failed_saves, why);
}

void StepDriver::fail_save(const std::string& why, Actions& out) {
  if (!save_) return;
  const int64_t step = save_->step;
  const bool final = save_->final;
  out.push_back(SaveFailed{step, final, /*begun=*/true, why});
  save_.reset();
  if (final) {
    final_save_failed(step, why, out);
  } else {
    count_failed_save(why);
    // Training may have been waiting for the copies or for this save to end (a step
    // open goes on as it was).
    advance(out);
  }
}

// A final save failed: it is tried once more, like an interval save is by the next
// one; a second failure ends the run as failed.
void StepDriver::final_save_failed(int64_t step, const std::string& why, Actions& out) {
  if (final_attempts_ < kFinalSaveAttempts) {
    out.push_back(RetryFinalSave{step, final_attempts_ + 1, kFinalSaveAttempts});
    begin_save(/*final=*/true, out);
    return;
  }
  out.push_back(FinishRunFinalSaveFailed{step, kFinalSaveAttempts, why, finish_error_});
  phase_ = Phase::Finished;
}

// ---- events ---------------------------------------------------------------------

void StepDriver::on_event(const GroupWired&, Actions& out) {
  if (phase_ == Phase::Wiring) advance(out);
}

void StepDriver::on_event(const UpdateDecided& e, Actions& out) {
  out.push_back(SendUpdate{e.step});
  if (e.rolls_back) {
    rollback_step_ = e.step;
    return;
  }
  run_ahead(e.step, e.decided_at, out);
}

void StepDriver::on_event(const TrainStepClosed& e, Actions& out) {
  step_ = e.step;
  consumed_samples_ = e.consumed_samples;
  recovering_ = false;
  phase_ = Phase::BetweenSteps;
  advance(out);
}

void StepDriver::on_event(const EvalClosed&, Actions& out) {
  phase_ = Phase::BetweenSteps;
  advance(out);
}

// Acted on at the next decision (advance, run_ahead).
void StepDriver::on_event(const StopRequested& e, Actions&) { stop_signal_ = e.signal; }

void StepDriver::on_event(const RegroupRequested&, Actions& out) {
  if (regroup_) return;
  regroup_ = true;
  if (phase_ == Phase::BetweenSteps) advance(out);
}

void StepDriver::on_event(const msg::SnapshotTaken& t, Actions& out) {
  if (!save_ || save_->step != t.step) return;
  save_->snapshots_missing.erase(optim_path(t.rank));
  if (!save_->snapshots_missing.empty()) return;
  // Every copy is taken: training goes on while the writers write.
  if (save_->shards_missing.empty())
    out.push_back(CommitSave{});
  else if (!save_->final)
    advance(out);
}

void StepDriver::on_event(const msg::ShardWritten& w, Actions& out) {
  const std::string writer = writer_path(w.rank);
  // A writer that reports a failed write stays up (the fault was the storage's): the
  // next save goes to it again.
  if (!save_ || save_->attempt != w.attempt) return;  // a checkpoint already given up
  if (!w.ok) {
    fail_save(fmt::format("{}: {}", writer, w.error), out);
    return;
  }
  out.push_back(KeepShard{w.record, w.bytes});
  save_->shards_missing.erase(writer);
  if (save_->shards_missing.empty() && save_->snapshots_missing.empty()) out.push_back(CommitSave{});
}

void StepDriver::on_event(const SaveOpened& e, Actions&) {
  if (!save_) return;
  save_->attempt = e.attempt;
  last_save_time_ = now_;
}

void StepDriver::on_event(const SaveNotOpened& e, Actions& out) {
  if (!save_) return;
  const int64_t step = save_->step;
  const bool final = save_->final;
  save_.reset();
  out.push_back(SaveFailed{step, final, /*begun=*/false, e.error});
  if (final) {
    final_save_failed(step, e.error, out);
  } else {
    count_failed_save(e.error);
    phase_ = Phase::BetweenSteps;  // the step's save decision is taken: training goes on
    advance(out);
  }
}

void StepDriver::on_event(const SaveCommitted&, Actions& out) {
  if (!save_) return;
  last_saved_step_ = save_->step;
  failed_saves_in_a_row_ = 0;
  const bool final = save_->final;
  save_.reset();
  if (final) {
    out.push_back(FinishRun{finish_status_, finish_error_});
    phase_ = Phase::Finished;
  } else {
    // What waited for this save goes on: a step held by it (WaitingForSave), the end
    // (Stopping), or training after the copies (TakingCopies: every shard was written
    // before the last copy was reported, so that report committed instead of
    // advancing; with the replicated optimizer the replicas that write no shard may
    // report last). A step or evaluation open goes on as it is (advance does nothing).
    advance(out);
  }
}

void StepDriver::on_event(const CommitFailed& e, Actions& out) { fail_save(e.error, out); }

void StepDriver::on_event(const WriterDown& e, Actions& out) {
  // A hung writer replaced (ReplaceWriters): the save deferred behind it begins.
  if (writers_replaced_.erase(e.path)) {
    if (writers_replaced_.empty() && phase_ == Phase::WaitingForWriters) begin_save(deferred_save_final_, out);
    return;
  }
  if (save_ && save_->shards_missing.count(e.path)) fail_save(e.path + " died while writing", out);
}

// A save not committed within save_timeout_s fails (a writer that hangs or never
// reports), naming what it still waits for; the next save retries (a final one at once).
// A writer that was handed its copy and has not reported is hung: it is replaced first,
// so the retry goes to its successor instead of timing out behind it again.
void StepDriver::on_event(const Tick&, Actions& out) {
  const double limit = cfg_.save_timeout_s;
  if (limit <= 0 || !save_ || now_ - save_->started < limit) return;
  std::string missing;
  for (const auto* set : {&save_->snapshots_missing, &save_->shards_missing})
    for (const auto& p : *set) missing += (missing.empty() ? "" : ", ") + p;
  const std::string why = fmt::format("not committed within checkpoint.save_timeout_s = {:g} s; still waiting for {}",
                                      limit, missing.empty() ? std::string("the commit") : missing);
  ReplaceWriters hung{{}, why};
  for (const auto& w : save_->shards_missing) {
    const auto o = cfg_.optimizer_of_writer.find(w);
    if (o == cfg_.optimizer_of_writer.end() || !save_->snapshots_missing.count(o->second)) hung.paths.push_back(w);
  }
  writers_replaced_.insert(hung.paths.begin(), hung.paths.end());
  if (!hung.paths.empty()) out.push_back(std::move(hung));
  fail_save(why, out);
}

// Acted on at the next step boundary: the step in flight (and one handed over ahead)
// ends, the save in flight ends, then the run ends as failed.
void StepDriver::on_event(const StorageFailed& e, Actions& out) {
  if (!fatal_error_.empty()) return;
  fatal_error_ = e.error;
  if (phase_ == Phase::WaitingForSave || phase_ == Phase::BetweenSteps) advance(out);
}

}  // namespace troupe::engine
