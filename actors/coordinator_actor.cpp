#include "actors/coordinator_actor.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <optional>
#include <random>
#include <set>
#include <variant>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/unix_time.h"
#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "engine/step_ledger.h"
#include "metrics/json.h"
#include "optim/grad_clip.h"
#include "sched/lr_schedule.h"

namespace troupe::actors {
namespace {

std::atomic<int> g_stop_signal{0};

using Clock = std::chrono::steady_clock;
using msg::StepKind;

// A final checkpoint that fails is begun again once before the run ends as failed.
constexpr int kFinalSaveAttempts = 2;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The checkpoint being saved.
struct SaveInFlight {
  int64_t step = 0;
  uint64_t attempt = 0;  // unique per save (a restarted group saves the same step again)
  std::optional<ckpt::CheckpointCommit> commit;
  engine::TrainingPosition position;
  std::set<std::string> snapshots_missing;  // optimizer shards that have not copied yet
  std::set<std::string> shards_missing;     // writers that have not written yet
  std::vector<ShardFile> shards;
  bool final = false;  // the run ends once it is committed
  Clock::time_point started = Clock::now();
  int64_t bytes = 0;
};

struct CoordinatorState {
  CoordinatorArgs args;
  std::string path = engine::coordinator_path();
  engine::Topology topo;
  std::unique_ptr<sched::LrSchedule> schedule;
  std::optional<data::BatchSource> data;
  std::vector<caf::actor> stages, optimizers, loaders;  // rank / dp order
  int32_t microbatches = 0;
  int64_t total_steps = 0;
  int32_t eval_microbatches = 0;  // per replica, 0: no validation
  std::string ckpt_root;

  // The position after the last finished training step.
  engine::TrainingPosition pos;

  // The step in flight.
  std::optional<engine::StepLedger> ledger;
  std::optional<optim::ClipDecision> decision;
  double lr = 0;
  Clock::time_point step_start;
  // Unix seconds: when the step in flight went out to the stages, and when the previous
  // training step ended on them (StageTiming::end_time). A training step's time runs
  // from the later of the two to its own end: with the next step handed over ahead,
  // from one update's end to the next, whenever the coordinator closes the steps.
  double step_issued_at = 0;
  double last_train_end = 0;
  int64_t evals_run = 0;
  int64_t last_eval_step = -1;
  std::vector<msg::ReplicaCounts> early_counts;  // loaders run ahead
  // The newest training step whose RunStep went out. The next step is handed to the
  // stages as soon as this one's update is decided (run_ahead): each starts it once
  // its own part of the update is applied, without waiting for this actor to close
  // the step. Reports of that step arriving before its ledger opens wait here.
  int64_t issued_step = 0;
  double issued_at = 0;  // Unix seconds when issued_step went out
  std::vector<std::variant<msg::LossReport, msg::NormPartial, msg::StageDone>> early_reports;

  // Checkpoints.
  std::optional<SaveInFlight> save;
  int64_t last_saved_step = 0;
  int64_t save_checked_step = -1;  // the step whose save decision was taken
  Clock::time_point last_save_time = Clock::now();
  std::string finish_status, finish_error;  // set when a final save must land first
  bool waiting_for_save = false;             // idle until the save in flight is committed
  int final_attempts = 0;                    // final saves begun (one retry after a failure)
  // Writers that reported a failed write: each dies right after, and its exit
  // (writer_down) belongs to that attempt. No save begins until they are down (a
  // snapshot sent meanwhile would go to the dying writer), then the deferred one does.
  std::set<std::string> writers_exiting;
  std::optional<bool> begin_when_writers_down;  // final?

  // Liveness.
  Clock::time_point last_progress = Clock::now();
  std::map<std::string, Clock::time_point> last_beat;

  bool started = false, done = false;
};

using Self = caf::stateful_actor<CoordinatorState>;

void next(Self* self);
void progress(Self* self);
void finish_run(Self* self, std::string status, std::string error = {});

void to_metrics(Self* self, caf::message m) {
  post_metrics(*self->state.args.metrics, *self->state.args.directory, std::move(m));
}

void event(Self* self, const std::string& type, int64_t step, metrics::Json fields) {
  to_metrics(self, caf::make_message(event_atom::value, type, step, unix_now(), fields.dump()));
}

void check_fault(Self* self, int64_t step, Fault::Phase phase) {
  engine::check_fault(self->state.args.faults.get(), self->state.path, step, phase);
}

// ---- checkpoints -----------------------------------------------------------

// Whether the checkpoint schedule asks for a save at the end of `step`.
bool save_due(const CoordinatorState& st, int64_t step) {
  const auto& ck = st.args.config.checkpoint();
  if (step <= st.last_saved_step) return false;
  if (ck.interval_steps() > 0 && step % ck.interval_steps() == 0) return true;
  return ck.interval_seconds() > 0 && seconds_since(st.last_save_time) >= ck.interval_seconds();
}

void begin_save(Self* self, bool final);

// The newest complete checkpoint on disk, for the summary ("" when there is none).
std::string newest_checkpoint(const CoordinatorState& st) {
  try {
    if (const auto step = ckpt::read_latest(st.ckpt_root)) return st.ckpt_root + "/" + ckpt::step_dir_name(*step);
  } catch (const ckpt::CheckpointError&) {
  }
  return {};
}

// A final save failed: it is tried once more, like an interval save is by the next
// one; a second failure ends the run as failed, naming it and the newest complete
// checkpoint.
void final_save_failed(Self* self, int64_t step, const std::string& why) {
  auto& st = self->state;
  if (st.final_attempts < kFinalSaveAttempts) {
    spdlog::warn("retrying the final checkpoint of step {} (attempt {} of {})", step, st.final_attempts + 1,
                 kFinalSaveAttempts);
    begin_save(self, /*final=*/true);
    return;
  }
  const auto newest = newest_checkpoint(st);
  finish_run(self, "failed",
             fmt::format("the final checkpoint of step {} failed {} times, last: {}; the newest complete checkpoint "
                         "is {}{}",
                         step, kFinalSaveAttempts, why, newest.empty() ? "none" : newest,
                         st.finish_error.empty() ? "" : " (the run had stopped: " + st.finish_error + ")"));
}

void fail_save(Self* self, const std::string& why) {
  auto& st = self->state;
  if (!st.save) return;
  spdlog::error("checkpoint of step {} failed: {}", st.save->step, why);
  event(self, "checkpoint_failed", st.save->step, {{"error", why}, {"final", st.save->final}});
  const bool final = st.save->final;
  const int64_t step = st.save->step;
  st.save.reset();
  if (final) {
    final_save_failed(self, step, why);
  } else {
    // Training may have been waiting for the copies or for this save to end.
    st.waiting_for_save = false;
    next(self);
  }
}

void commit_save(Self* self) {
  auto& st = self->state;
  auto& s = *st.save;
  check_fault(self, s.step, Fault::CHECKPOINT_WRITE);
  try {
    auto manifest = engine::make_manifest(st.args.config, s.position, std::move(s.shards));
    const auto dir = s.commit->commit(std::move(manifest), st.args.config.checkpoint().keep_last());
    const double secs = seconds_since(s.started);
    spdlog::info("checkpoint: step {} saved to {} ({:.1f} MB in {:.2f} s)", s.step, dir, s.bytes / 1e6, secs);
    event(self, "checkpoint", s.step, {{"dir", dir}, {"bytes", s.bytes}, {"seconds", secs}});
    st.last_saved_step = s.step;
  } catch (const ckpt::CheckpointError& e) {
    fail_save(self, e.what());
    return;
  }
  const bool final = s.final;
  st.save.reset();
  if (final) {
    finish_run(self, st.finish_status, st.finish_error);
  } else if (st.waiting_for_save) {
    st.waiting_for_save = false;
    next(self);
  }
}

// Opens the checkpoint of the current step and has every shard copy its state.
void begin_save(Self* self, bool final) {
  auto& st = self->state;
  if (!st.writers_exiting.empty()) {
    spdlog::info("checkpoint of step {} waits for {} writer(s) that failed to restart", st.pos.step,
                 st.writers_exiting.size());
    st.begin_when_writers_down = final;
    return;
  }
  SaveInFlight s;
  s.step = st.pos.step;
  s.position = st.pos;
  s.final = final;
  if (final) ++st.final_attempts;
  try {
    s.commit.emplace(ckpt::CheckpointCommit::begin(st.ckpt_root, s.step));
  } catch (const ckpt::CheckpointError& e) {
    spdlog::error("checkpoint of step {} not started: {}", s.step, e.what());
    event(self, "checkpoint_failed", s.step, {{"error", e.what()}, {"final", final}});
    if (final) final_save_failed(self, s.step, e.what());
    else next(self);
    return;
  }
  for (const auto& r : st.topo.all_ranks()) {
    s.snapshots_missing.insert(engine::optim_path(r));
    if (engine::writes_shard(st.args.config, r)) s.shards_missing.insert(engine::writer_path(r));
  }
  // Random, not counted: a restarted coordinator starts counting again.
  s.attempt = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  st.save = std::move(s);
  st.last_save_time = Clock::now();
  const auto dir = engine::directory_identity(st.save->commit->partial_dir());
  const msg::SnapshotCommand cmd{st.save->step, st.save->commit->partial_dir(), dir.inode, dir.generation,
                                 st.save->attempt};
  for (const auto& o : st.optimizers) self->send(o, cmd);
}

// ---- steps -------------------------------------------------------------------

void begin_eval(Self* self) {
  auto& st = self->state;
  const int64_t id = ++st.evals_run;
  st.ledger.emplace(st.topo, StepKind::Eval, id, st.eval_microbatches);
  st.decision.reset();
  st.step_start = st.last_progress = Clock::now();
  st.last_eval_step = st.pos.step;
  const msg::RunStep rs{id, StepKind::Eval, 0, st.eval_microbatches, /*previous_done_may_wait=*/false};
  for (const auto& l : st.loaders) self->send(l, rs);
  for (const auto& s : st.stages) self->send(s, rs);
}

void begin_train_step(Self* self) {
  auto& st = self->state;
  const int64_t step = st.pos.step + 1;
  check_fault(self, step, Fault::FORWARD);
  st.ledger.emplace(st.topo, StepKind::Train, step, st.microbatches);
  st.decision.reset();
  st.lr = st.schedule->lr_for_update(st.pos.successful_updates);
  st.step_start = st.last_progress = Clock::now();
  if (st.issued_step != step) {
    st.issued_step = step;
    st.issued_at = unix_now();
    const msg::RunStep rs{step, StepKind::Train, st.pos.consumed_samples, st.microbatches,
                          /*previous_done_may_wait=*/false};
    for (const auto& s : st.stages) self->send(s, rs);
  }
  st.step_issued_at = st.issued_at;
  auto early = std::move(st.early_counts);
  st.early_counts.clear();
  for (auto& c : early) {
    if (c.step == step)
      st.ledger->add(c);
    else if (c.step > step)
      st.early_counts.push_back(std::move(c));
  }
  auto reports = std::move(st.early_reports);
  st.early_reports.clear();
  for (auto& r : reports) std::visit([&](auto& x) { st.ledger->add(x); }, r);
  if (!reports.empty()) progress(self);
}

// Whether the validation set runs after `step` (every eval_interval steps, and at the end).
bool eval_due(const CoordinatorState& st, int64_t step) {
  const auto& t = st.args.config.training();
  return st.eval_microbatches > 0 &&
         ((t.eval_interval() > 0 && step % t.eval_interval() == 0) || step == st.total_steps);
}

// Whether `step` must wait for the checkpoint in flight (it may lag by at most
// max_lag_steps).
bool held_by_save(const CoordinatorState& st, int64_t step) {
  return st.save && step > st.save->step + std::max(0, st.args.config.checkpoint().max_lag_steps());
}

// Whether a report of a training step is for the step issued ahead, whose ledger is
// not open yet (kept in early_reports until it is).
bool ahead_of_ledger(const CoordinatorState& st, int64_t step) {
  return step == st.issued_step &&
         (!st.ledger || st.ledger->kind() != StepKind::Train || st.ledger->step() < step);
}

// Right after step n's update is decided: when nothing but step n+1 can follow n (no
// evaluation, no end, no stop asked, no checkpoint in flight that n+1 would have to
// wait for), its RunStep goes out now, and each stage starts it as soon as its part of
// n's update is applied. A checkpoint of step n does not hold n+1 back unless
// max_lag_steps is 0: its copies are taken while n+1's forward and backward run (they
// only read the parameters), and before n+1's update, which waits for n+1's ledger
// (SnapshotCommand and UpdateCommand reach each shard in the order they were sent).
// `decided_at` (Unix seconds, read before the UpdateCommands went out) dates the
// hand-over: no stage can end step n before it, so a step handed over ahead runs from
// n's end exactly, however late this thread gets here.
void run_ahead(Self* self, double decided_at) {
  auto& st = self->state;
  const auto& ledger = *st.ledger;
  const int64_t n = ledger.step();
  const bool no_lag = st.args.config.checkpoint().max_lag_steps() <= 0;
  if (st.done || g_stop_signal.load() || n >= st.total_steps || eval_due(st, n) || held_by_save(st, n + 1) ||
      (no_lag && save_due(st, n)) || st.issued_step != n)
    return;
  st.issued_step = n + 1;
  st.issued_at = decided_at;
  st.args.book->step_decided(n);
  // A step to be checkpointed closes at once (the save starts at its close, and the next
  // update waits for the save's copies), and so does a restarted group's first step.
  const bool done_may_wait = !save_due(st, n) && !st.args.book->recovering();
  const msg::RunStep rs{n + 1, StepKind::Train, st.pos.consumed_samples + st.args.config.batch().global_batch_size(),
                        st.microbatches, done_may_wait};
  for (const auto& s : st.stages) self->send(s, rs);
}

// Ends the run with st.finish_status, once the save in flight (if any) is committed or
// has failed: a checkpoint allowed to trail the steps (max_lag_steps) is never left
// half-written because the steps ran out.
void finish_or_wait_for_save(Self* self) {
  auto& st = self->state;
  if (st.save) {
    st.waiting_for_save = true;  // commit_save / fail_save call next() again
    return;
  }
  finish_run(self, st.finish_status, st.finish_error);
}

// What comes after a finished training or evaluation step (or the start).
void next(Self* self) {
  auto& st = self->state;
  if (st.done || st.ledger) return;
  if (st.save && !st.save->snapshots_missing.empty()) return;  // copies being taken: called again after
  const auto& ck = st.args.config.checkpoint();
  // A final checkpoint (end of run, SIGTERM) waits for the one being written.
  auto final_save = [&] {
    if (st.save) {
      st.waiting_for_save = true;
      return;
    }
    begin_save(self, /*final=*/true);
  };
  // Step n+1 already went out (run_ahead): it runs, whatever else is asked meanwhile.
  const bool issued = st.issued_step == st.pos.step + 1;
  if (int sig = g_stop_signal.load(); sig && !issued) {
    st.finish_status = "interrupted";
    st.finish_error = fmt::format("signal {}", sig);
    if (sig == SIGTERM && ck.save_on_exit() && st.pos.step > st.last_saved_step)
      final_save();
    else
      finish_or_wait_for_save(self);
    return;
  }
  if (st.save_checked_step != st.pos.step) {
    // With max_lag_steps 0 no save may start once step n+1 went out ahead: only a
    // time-based one can fall due after that was decided, and it waits one step.
    const bool may_save = !issued || ck.max_lag_steps() > 0;
    const bool due = st.pos.step < st.total_steps && save_due(st, st.pos.step);
    if (due && may_save && st.save) {
      // Every step the schedule names gets its checkpoint: this one waits for the save
      // in flight to end (commit_save / fail_save call next() again).
      st.waiting_for_save = true;
      return;
    }
    st.save_checked_step = st.pos.step;
    if (due && may_save) {
      begin_save(self, /*final=*/false);
      return;
    }
    if (due) {
      spdlog::info("checkpoint due at step {} (interval_seconds) deferred: step {} already went out and "
                   "max_lag_steps is 0",
                   st.pos.step, st.pos.step + 1);
      event(self, "checkpoint_deferred", st.pos.step,
            {{"reason", "max_lag_steps is 0 and the next step already went out"}});
    }
  }
  if (!issued && st.last_eval_step != st.pos.step && eval_due(st, st.pos.step)) {
    begin_eval(self);
    return;
  }
  if (st.pos.step < st.total_steps) {
    if (held_by_save(st, st.pos.step + 1)) {
      st.waiting_for_save = true;
      return;
    }
    begin_train_step(self);
    return;
  }
  st.finish_status = "completed";
  // The last step is saved with save_on_exit, and when interval_steps names it.
  const bool interval_step = ck.interval_steps() > 0 && st.pos.step % ck.interval_steps() == 0;
  if ((ck.save_on_exit() || interval_step) && st.pos.step > st.last_saved_step)
    final_save();
  else
    finish_or_wait_for_save(self);
}

// Microbatch losses and samples (spike records) and stage timings (stragglers).
StepExtras step_extras(const CoordinatorState& st, const engine::StepLedger& ledger, const metrics::StepRecord& r) {
  StepExtras x;
  x.detail.step = r.step;
  x.detail.loss = r.loss;
  x.detail.grad_norm = r.grad_norm;
  x.detail.lr = r.lr;
  const auto losses = ledger.microbatch_losses();
  const auto tokens = ledger.microbatch_loss_tokens();
  const auto ids = ledger.sample_ids();  // replica-major, microbatch, row
  const size_t rows = size_t(st.args.config.batch().micro_batch_size());
  for (int32_t d = 0; d < st.topo.dp; ++d)
    for (int32_t j = 0; j < st.microbatches; ++j) {
      const size_t i = size_t(d) * size_t(st.microbatches) + size_t(j);
      metrics::MicrobatchLoss m;
      m.replica = d;
      m.index = j;
      if ((i + 1) * rows <= ids.size()) m.sample_ids.assign(ids.begin() + i * rows, ids.begin() + (i + 1) * rows);
      m.loss_tokens = tokens[i];
      m.loss = tokens[i] > 0 ? losses[i] / double(tokens[i]) : 0.0;
      x.detail.microbatches.push_back(std::move(m));
    }
  for (const auto& rank : st.topo.all_ranks()) x.stage_paths.push_back(engine::stage_path(rank));
  x.timings = ledger.timings();
  return x;
}

// When a step ended: the last stage to apply its update (StageTiming::end_time, Unix
// seconds; stages in other processes read their own host's clock).
double step_end_time(const engine::StepLedger& ledger) {
  double end = 0;
  for (const auto& t : ledger.timings()) end = std::max(end, t.end_time);
  return end > 0 ? end : unix_now();
}

void finish_train_step(Self* self) {
  auto& st = self->state;
  auto& ledger = *st.ledger;
  const auto counts = ledger.counts();
  if (counts.loss_tokens != ledger.loss_tokens())
    throw std::logic_error(fmt::format("step {}: loaders counted {} loss-bearing tokens, last stages {}",
                                       ledger.step(), counts.loss_tokens, ledger.loss_tokens()));
  metrics::StepRecord r;
  r.step = ledger.step();
  st.pos.step = r.step;
  st.pos.consumed_samples += counts.samples;
  r.consumed_samples = st.pos.consumed_samples;
  r.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  r.lr = st.lr;
  r.grad_norm = st.decision->norm;
  r.clipped = st.decision->clipped;
  r.skipped = st.decision->skip;
  r.input_tokens = counts.input_tokens;
  r.loss_tokens = counts.loss_tokens;
  r.padding_tokens = counts.padding_tokens;
  r.wall_time = step_end_time(ledger);
  r.step_time_s = std::max(0.0, r.wall_time - std::max(st.last_train_end, st.step_issued_at));
  st.last_train_end = r.wall_time;
  if (r.skipped) {
    ++st.pos.skipped_updates;
    spdlog::warn("step {}: gradient norm is not finite ({}); update skipped, the LR schedule holds",
                 r.step, r.grad_norm);
  } else {
    ++st.pos.successful_updates;
  }
  if (st.data) st.pos.epoch = st.data->epoch_of(st.pos.consumed_samples);
  r = st.args.book->add_step(r, ledger.sample_ids(), ledger.timings());
  if (auto rec = st.args.book->first_step_done()) {
    spdlog::info("recovered: step {} done after restart {}; {:.3f} s from the failure: detection {:.3f} s, restart "
                 "{:.3f} s, reload {:.3f} s, re-warm {:.3f} s",
                 r.step, st.args.book->restarts(), rec->total_s(), rec->detection_s, rec->restart_s, rec->reload_s,
                 rec->rewarm_s);
    event(self, "recovery", r.step,
          {{"restarts", st.args.book->restarts()},
           {"detection_s", rec->detection_s},
           {"restart_s", rec->restart_s},
           {"reload_s", rec->reload_s},
           {"rewarm_s", rec->rewarm_s}});
  }
  to_metrics(self, caf::make_message(r));
  to_metrics(self, caf::make_message(step_extras(st, ledger, r)));
  st.ledger.reset();
  next(self);
}

void finish_eval(Self* self) {
  auto& st = self->state;
  auto& ledger = *st.ledger;
  const auto counts = ledger.counts();
  metrics::EvalRecord e;
  e.step = st.pos.step;
  e.consumed_samples = st.pos.consumed_samples;
  e.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  e.samples = counts.samples;
  e.loss_tokens = counts.loss_tokens;
  e.time_s = seconds_since(st.step_start);
  e.wall_time = unix_now();
  st.args.book->add_eval(e);
  to_metrics(self, caf::make_message(e));
  st.ledger.reset();
  next(self);
}

// Called after every report: moves the step along when it can.
void progress(Self* self) {
  auto& st = self->state;
  st.last_progress = Clock::now();
  if (!st.ledger) return;
  auto& ledger = *st.ledger;
  if (ledger.kind() == StepKind::Train && !st.decision && ledger.norms_complete()) {
    check_fault(self, ledger.step(), Fault::REDUCE);
    st.decision = optim::decide(ledger.total_sum_squares(), st.args.config.optimizer().clip_grad());
    check_fault(self, ledger.step(), Fault::OPTIMIZER);
    const double decided_at = unix_now();
    const msg::UpdateCommand cmd{ledger.step(), st.lr, st.decision->factor, st.decision->skip};
    for (const auto& o : st.optimizers) self->send(o, cmd);
    run_ahead(self, decided_at);
  }
  if (!ledger.complete()) return;
  if (ledger.kind() == StepKind::Train) {
    if (st.decision) finish_train_step(self);
  } else {
    finish_eval(self);
  }
}

void finish_run(Self* self, std::string status, std::string error) {
  auto& st = self->state;
  if (st.done) return;
  st.done = true;
  auto outcome = st.args.book->outcome();
  metrics::RunSummary summary;
  for (const auto& r : outcome.steps) metrics::accumulate(summary, r);
  summary.status = status;
  summary.restarts = st.args.book->restarts();
  if (!outcome.evals.empty()) summary.last_eval_loss = outcome.evals.back().loss;
  summary.elapsed_s = st.args.book->elapsed_seconds();
  summary.wall_time = unix_now();
  summary.error = error;
  summary.newest_checkpoint = newest_checkpoint(st);
  st.args.book->finish(status, error, summary);
  to_metrics(self, caf::make_message(summary));
  if (st.args.client) self->send(st.args.client, finished_atom::value, st.args.book->outcome());
}

// ---- wiring --------------------------------------------------------------------

void wire(Self* self, const caf::actor& a, const Registry& peers, std::function<void()> then) {
  self->request(a, std::chrono::seconds(60), wire_atom::value, peers)
      .then([then](wired_atom) { then(); },
            [self](caf::error& e) {
              throw std::runtime_error("wiring the training group failed: " + self->system().render(e));
            });
}

// Looks up every member, wires them and starts once all have answered.
void wire_group(Self* self, const Registry& peers) {
  auto& st = self->state;
  st.stages.clear();
  st.optimizers.clear();
  st.loaders.clear();
  for (const auto& r : st.topo.all_ranks()) {
    st.stages.push_back(peers.at(engine::stage_path(r)));
    st.optimizers.push_back(peers.at(engine::optim_path(r)));
  }
  for (int32_t d = 0; d < st.topo.dp; ++d) st.loaders.push_back(peers.at(engine::loader_path(d)));
  auto pending = std::make_shared<size_t>(st.stages.size() + st.optimizers.size() + st.loaders.size());
  auto on_wired = [self, pending] {
    if (--*pending > 0) return;
    auto& s = self->state;
    s.started = true;
    s.args.book->group_ready();
    for (const auto& l : s.loaders)
      self->send(l, start_atom::value, s.pos.step + 1, s.pos.consumed_samples, s.total_steps);
    next(self);
  };
  for (const auto& a : st.stages) wire(self, a, peers, on_wired);
  for (const auto& a : st.optimizers) wire(self, a, peers, on_wired);
  for (const auto& a : st.loaders) wire(self, a, peers, on_wired);
}

// A loader restarted on its own: it resumes at the step in flight (stages drop
// the microbatches they already consumed).
void rejoin_loader(Self* self, const std::string& path, const caf::actor& loader, const Registry& peers) {
  auto& st = self->state;
  int32_t dp = -1;
  for (int32_t d = 0; d < st.topo.dp; ++d)
    if (engine::loader_path(d) == path) dp = d;
  if (dp < 0) return;
  st.loaders[size_t(dp)] = loader;
  for (const auto& r : st.topo.all_ranks())
    if (r.dp == dp) self->send(st.stages[size_t(st.topo.index(r))], loader_atom::value, loader);
  const bool in_flight = st.ledger && st.ledger->kind() == StepKind::Train;
  const int64_t first = in_flight ? st.ledger->step() : st.pos.step + 1;
  const int64_t consumed = st.pos.consumed_samples;  // the step in flight starts here
  spdlog::info("{} restarted: resuming its stream at step {}", path, first);
  wire(self, loader, peers, [self, loader, first, consumed] {
    self->send(loader, start_atom::value, first, consumed, self->state.total_steps);
  });
}

// ---- liveness --------------------------------------------------------------------

void watchdog(Self* self) {
  auto& st = self->state;
  const double limit = st.args.config.supervision().step_watchdog_s();
  if (limit <= 0 || !st.ledger) return;
  const double quiet = seconds_since(st.last_progress);
  if (quiet < limit) return;
  std::string beats;
  for (const auto& r : st.topo.all_ranks()) {
    const auto p = engine::stage_path(r);
    auto it = st.last_beat.find(p);
    beats += fmt::format("{}{} {}", beats.empty() ? "" : ", ", p,
                         it == st.last_beat.end() ? std::string("never") : fmt::format("{:.1f} s ago", seconds_since(it->second)));
  }
  throw std::runtime_error(fmt::format("step watchdog: {} step {} made no progress for {:.1f} s (limit {:g} s); "
                                       "waiting for: {}; last heartbeats: {}",
                                       st.ledger->kind() == StepKind::Train ? "training" : "evaluation",
                                       st.ledger->step(), quiet, limit, st.ledger->missing(), beats));
}

// A save not committed within checkpoint.save_timeout_s fails (a writer that hangs
// or never reports), naming what it still waits for; the next save retries.
void save_deadline(Self* self) {
  auto& st = self->state;
  const double limit = st.args.config.checkpoint().save_timeout_s();
  if (limit <= 0 || !st.save || seconds_since(st.save->started) < limit) return;
  std::string missing;
  for (const auto* set : {&st.save->snapshots_missing, &st.save->shards_missing})
    for (const auto& p : *set) missing += (missing.empty() ? "" : ", ") + p;
  fail_save(self, fmt::format("not committed within checkpoint.save_timeout_s = {:g} s; still waiting for {}", limit,
                              missing.empty() ? std::string("the commit") : missing));
}

caf::behavior coordinator_impl(Self* self, CoordinatorArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, st.path);
  const auto& c = st.args.config;
  st.topo = engine::Topology::of(c);
  st.schedule = std::make_unique<sched::LrSchedule>(c);
  st.microbatches = int32_t(config::microbatches_per_replica(c));
  st.total_steps = config::full_updates(c);
  st.eval_microbatches = int32_t(config::eval_microbatches_per_replica(c));
  st.ckpt_root = engine::checkpoint_root(c);
  st.data = data::BatchSource::open(c);
  if (st.args.resume) {
    st.pos = engine::position_of(st.args.resume->manifest());
    st.last_saved_step = st.pos.step;
    st.save_checked_step = st.pos.step;
    st.last_eval_step = st.pos.step;  // do not re-run an evaluation the checkpoint's run already had
  }
  // A restarted group redoes the steps after its checkpoint: TensorBoard's marker.
  if (st.args.book->resume_from(st.pos.step) > 0)
    to_metrics(self, caf::make_message(restart_marker_atom::value, st.pos.step, unix_now()));
  const double period = std::clamp(c.supervision().heartbeat_interval_s(), 0.05, 1.0);
  const auto tick = std::chrono::milliseconds(int64_t(period * 1000));
  self->delayed_send(self, tick, tick_atom::value);
  return {
      [self](wire_atom, const Registry& peers) { wire_group(self, peers); },
      [](ping_atom) { return pong_atom::value; },
      [self](rejoin_atom, const std::string& path, const caf::actor& who, const Registry& peers) {
        if (self->state.started) rejoin_loader(self, path, who, peers);
      },
      [self](const msg::LossReport& r) {
        auto& s = self->state;
        if (r.kind == StepKind::Train && ahead_of_ledger(s, r.step)) return s.early_reports.push_back(r);
        s.ledger->add(r);
        progress(self);
      },
      [self](msg::ReplicaCounts& r) {
        auto& s = self->state;
        const bool current = s.ledger && s.ledger->kind() == r.kind && s.ledger->step() == r.step;
        if (!current) {
          if (r.kind != StepKind::Train || r.step <= s.pos.step) return;  // a repeat of a finished step
          for (const auto& e : s.early_counts)
            if (e.step == r.step && e.dp == r.dp) return;  // a restarted loader's repeat
          s.early_counts.push_back(std::move(r));
          return;
        }
        if (s.ledger->has_counts(r.dp)) return;  // a restarted loader's repeat
        s.ledger->add(r);
        progress(self);
      },
      [self](const msg::NormPartial& r) {
        auto& s = self->state;
        if (ahead_of_ledger(s, r.step)) return s.early_reports.push_back(r);
        s.ledger->add(r);
        progress(self);
      },
      [self](msg::StageDone& r) {
        auto& s = self->state;
        if (r.kind == StepKind::Train && ahead_of_ledger(s, r.step)) return s.early_reports.push_back(std::move(r));
        s.ledger->add(r);
        progress(self);
      },
      [self](const msg::Heartbeat& h) {
        self->state.last_beat[h.path] = Clock::now();
        self->state.last_progress = Clock::now();
      },
      [self](const msg::SnapshotTaken& t) {
        auto& s = self->state;
        if (!s.save || s.save->step != t.step) return;
        s.save->snapshots_missing.erase(engine::optim_path({t.dp, t.pp, t.tp}));
        if (!s.save->snapshots_missing.empty()) return;
        // Every copy is taken: training goes on while the writers write.
        if (s.save->shards_missing.empty())
          commit_save(self);
        else if (!s.save->final)
          next(self);
      },
      [self](const msg::ShardWritten& w) {
        auto& s = self->state;
        if (!w.ok) s.writers_exiting.insert(engine::writer_path({w.dp, w.pp, w.tp}));  // it dies next
        if (!s.save || s.save->attempt != w.attempt) return;  // a checkpoint already given up
        if (!w.ok) {
          fail_save(self, fmt::format("{}: {}", engine::writer_path({w.dp, w.pp, w.tp}), w.error));
          return;
        }
        ShardFile f;
        f.ParseFromString(w.record);
        s.save->shards.push_back(std::move(f));
        s.save->bytes += w.bytes;
        s.save->shards_missing.erase(engine::writer_path({w.dp, w.pp, w.tp}));
        if (s.save->shards_missing.empty() && s.save->snapshots_missing.empty()) commit_save(self);
      },
      [self](writer_down_atom, const std::string& path) {
        auto& s = self->state;
        // The exit that follows a reported failure belongs to that attempt only.
        if (s.writers_exiting.erase(path)) {
          if (s.writers_exiting.empty() && s.begin_when_writers_down) {
            const bool final = *s.begin_when_writers_down;
            s.begin_when_writers_down.reset();
            begin_save(self, final);
          }
          return;
        }
        if (s.save && s.save->shards_missing.count(path)) fail_save(self, path + " died while writing");
      },
      [self, tick](tick_atom) {
        watchdog(self);
        save_deadline(self);
        self->delayed_send(self, tick, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::event_based_actor* parent, CoordinatorArgs args) {
  return parent->spawn(coordinator_impl, std::move(args));
}

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }
int stop_signal() { return g_stop_signal.load(); }
void clear_stop() { g_stop_signal.store(0); }

}  // namespace troupe::actors
