#include "actors/coordinator_actor.h"

#include <atomic>
#include <chrono>
#include <set>
#include <cmath>
#include <filesystem>
#include <csignal>
#include <optional>
#include <random>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/metrics_actor.h"
#include "actors/peers.h"
#include "actors/unix_time.h"
#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "engine/blend_accounting.h"
#include "engine/checkpointing.h"
#include "engine/step_close.h"
#include "engine/document_losses.h"
#include "engine/rollback.h"
#include "engine/spike_guard.h"
#include "engine/step_driver.h"
#include "engine/step_ledger.h"
#include "engine/storage_space.h"
#include "metrics/json.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"
#include "metrics/spike_detector.h"
#include "optim/grad_clip.h"
#include "sched/lr_schedule.h"

namespace troupe::actors {
namespace {

std::atomic<int> g_stop_signal{0};

using Clock = std::chrono::steady_clock;
using msg::StepKind;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// The driver's time: steady-clock seconds.
double steady_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// What the checkpoint being saved writes (the driver decides when and whether).
struct SaveInFlight {
  int64_t step = 0;
  std::optional<ckpt::CheckpointCommit> commit;
  engine::TrainingPosition position;
  std::vector<ShardFile> shards;
  Clock::time_point started = Clock::now();
  int64_t bytes = 0;
};

struct CoordinatorState {
  CoordinatorArgs args;
  std::string path = engine::coordinator_path();
  engine::Topology topo;
  std::unique_ptr<sched::LrSchedule> schedule;
  std::optional<data::BatchSource> data;
  std::optional<data::BatchSource> valid;  // with evaluation over a blend: its losses per dataset
  std::vector<stage_actor> stages;          // rank order
  std::vector<optimizer_actor> optimizers;  // rank order
  std::vector<loader_actor> loaders;        // dp order
  run_client client;                        // args.client
  int32_t microbatches = 0;
  int64_t total_steps = 0;
  int32_t eval_microbatches = 0;  // per replica, 0: no validation
  std::string ckpt_root;
  // Decides what happens next (engine/step_driver.h); this actor keeps the data.
  std::optional<engine::StepDriver> driver;
  std::optional<engine::SpikeGuard> guard;  // logging.on_spike
  // The training steps handed out whose update the one optimizer shard decides itself
  // (their RunStep's msg::UpdateRule, set by the step driver: one rank and
  // logging.on_spike not acting, so that the decision is its partial's alone; not the
  // step run ahead after a step to be saved). No UpdateCommand goes out for them; the
  // coordinator's own decision is the step record's, and what the shard applied is
  // checked against it (StepLedger::applied_mismatch).
  std::set<int64_t> decided_by_shard;

  // The position after the last finished training step.
  engine::TrainingPosition pos;

  // The step in flight.
  std::optional<engine::StepLedger> ledger;
  std::optional<optim::ClipDecision> decision;
  bool spike_dropped = false;  // the step in flight's update is dropped by logging.on_spike
  // logging.on_spike ROLLBACK: the step in flight is a spike that rolls the run back
  // (the request), or that stops it instead (why).
  std::optional<std::variant<engine::RollbackRequest, std::string>> rollback;
  double lr = 0;
  Clock::time_point step_start;
  // Unix seconds: when the step in flight went out to the stages, and when the previous
  // training step ended on them (StageTiming::end_time). A training step's time runs
  // from the later of the two to its own end: with the next step handed over ahead,
  // from one update's end to the next, whenever the coordinator closes the steps.
  double step_issued_at = 0;
  double last_train_end = 0;
  std::vector<msg::ReplicaCounts> early_counts;  // loaders run ahead
  // Reports of the step handed over ahead (driver->report_is_early) that arrive before
  // its ledger opens wait here.
  double issued_at = 0;  // Unix seconds when driver->issued_step() went out
  std::vector<std::variant<msg::LossReport, msg::NormPartial, msg::StageDone>> early_reports;

  std::optional<SaveInFlight> save;
  // The state mirror's steps being gathered (args.mirror set).
  std::optional<engine::MirrorAssembly> mirror;
  // The step the shards were last asked to mirror, until it is filed: one mirrored step
  // in flight at a time, so that no copy piles up behind a slow keeper.
  std::optional<int64_t> mirror_asked;
  int64_t started_at = 0;  // the step this group resumed after (0: a fresh start)

  // Liveness.
  Clock::time_point last_progress = Clock::now();
  std::map<std::string, Clock::time_point> last_beat;

  bool started = false;
};

using Self = coordinator_actor::stateful_base<CoordinatorState>;

void feed(Self* self, const engine::StepEvent& e);
void progress(Self* self);
void finish_run(Self* self, std::string status, std::string error = {});

void to_metrics(Self* self, caf::message m) {
  post_metrics(*self->state.args.metrics, *self->state.args.directory, std::move(m));
}

void event(Self* self, const std::string& type, int64_t step, metrics::Json fields) {
  to_metrics(self, caf::make_message(event_atom::value, type, step, unix_now(), fields.dump()));
}

void check_fault(Self* self, int64_t step, Fault::Phase phase) {
  engine::FaultPlan* plan = self->state.args.faults.get();
  if (plan && plan->targets(self->state.path)) {
    auto is_stop = [](const Fault& f) { return f.kind() == Fault::REQUEST_STOP; };
    if (plan->take(self->state.path, step, phase, is_stop)) {
      spdlog::warn("{}: injected stop request at step {} during {} (as SIGTERM)", self->state.path, step,
                   engine::phase_name(phase));
      request_stop(SIGTERM);
    }
  }
  engine::check_fault(plan, self->state.path, step, phase);
}

// The newest complete checkpoint on disk, for the summary ("" when there is none).
std::string newest_checkpoint(const CoordinatorState& st) {
  try {
    if (const auto step = ckpt::read_latest(st.ckpt_root)) return st.ckpt_root + "/" + ckpt::step_dir_name(*step);
  } catch (const ckpt::CheckpointError&) {
  }
  return {};
}

// Whether the shards mirror step `step`'s state (the state mirror on, and no mirrored
// step in flight: a copy that never came, its keeper restarting, is given up after
// kMirrorGiveUpSteps steps).
constexpr int64_t kMirrorGiveUpSteps = 4;
bool ask_mirror(CoordinatorState& st, int64_t step) {
  if (!st.mirror) return false;
  if (st.mirror_asked && step - *st.mirror_asked < kMirrorGiveUpSteps) return false;
  st.mirror_asked = step;
  return true;
}

// ---- the driver's actions as messages ------------------------------------------

// Opens the checkpoint of `step` and has every shard copy its state.
void begin_save(Self* self, const engine::BeginSave& a) {
  auto& st = self->state;
  // A slow coordinator, for the tests: its SnapshotCommands leave late.
  engine::check_delay(st.args.faults.get(), st.path, a.step, Fault::CHECKPOINT_WRITE);
  SaveInFlight s;
  s.step = a.step;
  s.position = st.pos;
  try {
    s.commit.emplace(ckpt::CheckpointCommit::begin(st.ckpt_root, s.step));
  } catch (const ckpt::CheckpointError& e) {
    return feed(self, engine::SaveNotOpened{e.what()});
  }
  // Random, not counted: a restarted coordinator starts counting again.
  const uint64_t attempt = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  st.save = std::move(s);
  const auto dir = engine::directory_identity(st.save->commit->partial_dir());
  const msg::SnapshotCommand cmd{st.save->step, st.save->commit->partial_dir(), dir.inode, dir.generation, attempt};
  for (const auto& o : st.optimizers) self->send(o, cmd);
  feed(self, engine::SaveOpened{attempt});
}

void commit_save(Self* self) {
  auto& st = self->state;
  auto& s = *st.save;
  check_fault(self, s.step, Fault::CHECKPOINT_WRITE);
  try {
    auto manifest = engine::make_manifest(*st.args.config, st.topo, st.args.skip_samples, s.position, std::move(s.shards));
    const auto dir = s.commit->commit(std::move(manifest), st.args.config->checkpoint().keep_last());
    const double secs = seconds_since(s.started);
    spdlog::info("checkpoint: step {} saved to {} ({:.1f} MB in {:.2f} s)", s.step, dir, s.bytes / 1e6, secs);
    event(self, "checkpoint", s.step, {{"dir", dir}, {"bytes", s.bytes}, {"seconds", secs}});
  } catch (const ckpt::CheckpointError& e) {
    return feed(self, engine::CommitFailed{e.what()});
  }
  st.save.reset();
  feed(self, engine::SaveCommitted{});
}

// Completes the driver's RunStep `rs` of a training step for the stages: when its shard
// decides the update, the rule's rate (`updates_before`, the count of successful updates
// before the step, sets it) and clip_grad.
msg::RunStep with_update_rule(CoordinatorState& st, msg::RunStep rs, int64_t updates_before) {
  if (!rs.update.shard_decides) return rs;
  st.decided_by_shard.insert(rs.step);
  rs.update.lr = st.schedule->lr_for_update(updates_before);
  rs.update.clip_grad = st.args.config->optimizer().clip_grad();
  return rs;
}

void open_train_step(Self* self, const engine::OpenTrainStep& a) {
  auto& st = self->state;
  const int64_t step = a.step;
  check_fault(self, step, Fault::FORWARD);
  st.ledger.emplace(st.topo, StepKind::Train, step, st.microbatches);
  st.decision.reset();
  st.lr = st.schedule->lr_for_update(st.pos.successful_updates);
  st.step_start = st.last_progress = Clock::now();
  if (a.run_step) {
    st.issued_at = unix_now();
    const auto rs = with_update_rule(st, *a.run_step, st.pos.successful_updates);
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

void open_eval(Self* self, const engine::OpenEval& a) {
  auto& st = self->state;
  st.ledger.emplace(st.topo, StepKind::Eval, a.run_step.step, st.eval_microbatches);
  st.decision.reset();
  st.step_start = st.last_progress = Clock::now();
  for (const auto& l : st.loaders) self->send(l, a.run_step);
  for (const auto& s : st.stages) self->send(s, a.run_step);
}

// The step handed over ahead (the driver's run_ahead): each stage starts it as soon as
// its part of the previous update is applied.
void send_run_step_ahead(Self* self, const engine::SendRunStepAhead& a) {
  auto& st = self->state;
  st.issued_at = a.issued_at;
  st.args.book->step_decided(a.run_step.step - 1);
  // The step before it is decided but not closed: its update counts if it is not skipped.
  const auto rs = with_update_rule(st, a.run_step, st.pos.successful_updates + (st.decision->skip ? 0 : 1));
  for (const auto& s : st.stages) self->send(s, rs);
}

// Whether an error is a file system's "no space" (ENOSPC, or EDQUOT: a quota).
bool out_of_space(const std::string& error) {
  return error.find("No space left on device") != std::string::npos ||
         error.find("Disk quota exceeded") != std::string::npos;
}

// One report per failed save: the error, and for a lack of space what a checkpoint needs
// and what the disk has. Its partial directory is removed (the writers still writing see
// their save given up and drop their shards).
void save_failed(Self* self, const engine::SaveFailed& a) {
  auto& st = self->state;
  std::string error = a.error;
  if (out_of_space(error)) error += "; " + engine::space_note(*st.args.config, st.ckpt_root);
  if (a.begun)
    spdlog::error("checkpoint of step {} failed: {}", a.step, error);
  else
    spdlog::error("checkpoint of step {} not started: {}", a.step, error);
  if (st.save && st.save->commit) {
    try {
      st.save->commit->discard();
    } catch (const std::exception& e) {
      spdlog::warn("checkpoint of step {}: its partial directory stays until the next commit: {}", a.step, e.what());
    }
  }
  event(self, "checkpoint_failed", a.step, {{"error", error}, {"final", a.final}});
  st.save.reset();
}

// The run cannot keep what it writes (engine::FinishRunFailed): it ends as failed, naming
// the newest complete checkpoint (which `latest` names and a resume starts from) and the
// space a checkpoint needs.
void finish_failed(Self* self, const engine::FinishRunFailed& a) {
  const auto& st = self->state;
  const auto newest = newest_checkpoint(st);
  finish_run(self, "failed",
             fmt::format("{}; the newest complete checkpoint is {}; {}", a.error, newest.empty() ? "none" : newest,
                         engine::space_note(*st.args.config, st.ckpt_root)));
}

// Hung writers (engine::ReplaceWriters): their supervisor abandons and replaces them;
// each replacement comes back as writer_down_atom.
void replace_writers(Self* self, const engine::ReplaceWriters& a) {
  const auto writers = self->state.args.directory->get(engine::writers_supervisor_path());
  for (const auto& path : a.paths) {
    spdlog::error("{}: did not write its shard in time; replacing it", path);
    if (writers) caf::anon_send(writers, abandon_atom::value, path, a.reason);  // the supervisors stay untyped
  }
}

// The spike step closed (logging.on_spike ROLLBACK): the checkpoint root moves back and
// the run's client starts the next group from it (actors/runtime.cpp), or the run stops
// (the cap, a skip past the first epoch, a root that cannot be moved back).
void roll_back(Self* self) {
  auto& st = self->state;
  if (const auto* why = std::get_if<std::string>(&*st.rollback)) {
    const auto newest = newest_checkpoint(st);
    return finish_run(self, "failed",
                      fmt::format("{}; the newest complete checkpoint is {}", *why, newest.empty() ? "none" : newest));
  }
  const auto& req = std::get<engine::RollbackRequest>(*st.rollback);
  engine::RollbackDone done;
  try {
    done = engine::roll_back_checkpoints(*st.args.config, req.spike_step);
  } catch (const std::exception& e) {
    return finish_run(self, "failed", fmt::format("logging.on_spike ROLLBACK at step {}: {}", req.spike_step, e.what()));
  }
  for (const auto& line : done.report) spdlog::warn("rollback: passed over {}", line);
  spdlog::warn("rollback: step {} is a spike; starting again from {} (step {}) and skipping {} sample(s) from "
               "position {} of the order{}",
               req.spike_step, done.target_dir.empty() ? std::string("scratch") : done.target_dir, done.target_step,
               req.skip_ids.size(), req.first_position,
               done.aside_dir.empty() ? std::string() : "; the later checkpoints moved to " + done.aside_dir);
  st.args.book->rolled_back(req, done);
  event(self, "rollback", req.spike_step,
        {{"resume_step", done.target_step},
         {"resume_dir", done.target_dir},
         {"first_position", req.first_position},
         {"skipped_samples", req.skip_ids},
         {"moved_steps", done.moved_steps},
         {"moved_to", done.aside_dir},
         {"rollbacks", st.args.book->rollbacks().size()}});
  if (st.client) self->send(st.client, finished_atom::value, st.args.book->outcome());
}

// The group's end for a regroup (engine::RegroupRequested): this step is saved; the
// runtime starts the next group from it on the larger placement.
void regroup(Self* self) {
  auto& st = self->state;
  const int64_t step = st.driver->last_saved_step();
  spdlog::info("step {} saved: the training group ends to continue on a larger placement (now {} physical "
               "replica(s))",
               step, st.topo.physical_replicas());
  auto outcome = st.args.book->outcome();
  outcome.status = "regroup";
  if (st.client) self->send(st.client, finished_atom::value, std::move(outcome));
}

// A final save failed twice: the run ends as failed, naming it and the newest complete
// checkpoint.
void finish_final_save_failed(Self* self, const engine::FinishRunFinalSaveFailed& a) {
  const auto newest = newest_checkpoint(self->state);
  finish_run(self, "failed",
             fmt::format("the final checkpoint of step {} failed {} times, last: {}; the newest complete checkpoint "
                         "is {}{}",
                         a.step, a.attempts, a.error, newest.empty() ? "none" : newest,
                         a.stop_reason.empty() ? "" : " (the run had stopped: " + a.stop_reason + ")"));
}

void carry_out(Self* self, const engine::StepAction& action) {
  auto& st = self->state;
  std::visit(
      [&](const auto& a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, engine::OpenTrainStep>) {
          open_train_step(self, a);
        } else if constexpr (std::is_same_v<A, engine::OpenEval>) {
          open_eval(self, a);
        } else if constexpr (std::is_same_v<A, engine::SendUpdate>) {
          // A shard deciding the step's update has decided the same already (and is applying it).
          const msg::UpdateCommand cmd{a.step, st.lr, st.decision->factor, st.decision->skip, ask_mirror(st, a.step)};
          if (st.decided_by_shard.erase(a.step) == 0)
            for (const auto& o : st.optimizers) self->send(o, cmd);
        } else if constexpr (std::is_same_v<A, engine::SendRunStepAhead>) {
          send_run_step_ahead(self, a);
        } else if constexpr (std::is_same_v<A, engine::BeginSave>) {
          begin_save(self, a);
        } else if constexpr (std::is_same_v<A, engine::RetryFinalSave>) {
          spdlog::warn("retrying the final checkpoint of step {} (attempt {} of {})", a.step, a.attempt, a.attempts);
        } else if constexpr (std::is_same_v<A, engine::ReplaceWriters>) {
          replace_writers(self, a);
        } else if constexpr (std::is_same_v<A, engine::SaveWaitsForWriters>) {
          spdlog::info("checkpoint of step {} waits for {} hung writer(s) to be replaced", a.step, a.writers);
        } else if constexpr (std::is_same_v<A, engine::SaveDeferred>) {
          spdlog::info("checkpoint due at step {} (interval_seconds) deferred: step {} already went out and {}",
                       a.step, a.step + 1, a.reason);
          event(self, "checkpoint_deferred", a.step, {{"reason", a.reason + " and the next step already went out"}});
        } else if constexpr (std::is_same_v<A, engine::KeepShard>) {
          ShardFile f;
          f.ParseFromString(a.record);
          st.save->shards.push_back(std::move(f));
          st.save->bytes += a.bytes;
        } else if constexpr (std::is_same_v<A, engine::CommitSave>) {
          commit_save(self);
        } else if constexpr (std::is_same_v<A, engine::SaveFailed>) {
          save_failed(self, a);
        } else if constexpr (std::is_same_v<A, engine::FinishRun>) {
          if (a.status == "rollback")
            roll_back(self);
          else if (a.status == "regroup")
            regroup(self);
          else
            finish_run(self, a.status, a.error);
        } else if constexpr (std::is_same_v<A, engine::RegroupDropped>) {
          spdlog::warn("step {}: the checkpoint a regroup needs failed; the run goes on on {} physical replica(s)",
                       a.step, st.topo.physical_replicas());
          event(self, "regroup_dropped", a.step, {{"physical_replicas", int64_t(st.topo.physical_replicas())}});
        } else if constexpr (std::is_same_v<A, engine::FinishRunFailed>) {
          finish_failed(self, a);
        } else if constexpr (std::is_same_v<A, engine::FinishRunFinalSaveFailed>) {
          finish_final_save_failed(self, a);
        } else {
          static_assert(sizeof(A) == 0, "an action the coordinator does not carry out");
        }
      },
      action);
}

// Hands the driver one event and carries out its actions in order. An action may feed
// another event at once (a save opened, a commit failed, early reports closing a step):
// its actions run before the remaining ones, where the driver puts none (step_driver.h).
// The signal handler can only set g_stop_signal: its value goes to the driver before
// every event, so a stop is seen at the same decisions as before.
void feed(Self* self, const engine::StepEvent& e) {
  auto& driver = *self->state.driver;
  if (const int sig = g_stop_signal.load(); sig != driver.stop_signal())
    driver.on(engine::StopRequested{sig}, steady_now());
  for (const auto& a : driver.on(e, steady_now())) carry_out(self, a);
}

// ---- steps -------------------------------------------------------------------

// Whether a report of a training step is for the step issued ahead, whose ledger is
// not open yet (kept in early_reports until it is).
bool ahead_of_ledger(const CoordinatorState& st, int64_t step) { return st.driver->report_is_early(step); }

// A step of the state mirror whose shards and position are all in: its manifest filed.
void file_mirror(Self* self, std::optional<engine::MirrorAssembly::Complete> done) {
  auto& st = self->state;
  if (!done) return;
  if (st.mirror_asked && *st.mirror_asked <= done->step) st.mirror_asked.reset();
  st.args.mirror->file(engine::make_manifest(*st.args.config, st.topo, st.args.skip_samples, done->position,
                                             std::move(done->shards)),
                       std::move(done->holders));
}

void finish_train_step(Self* self) {
  auto& st = self->state;
  auto& ledger = *st.ledger;
  metrics::StepRecord r = engine::close_train_step(ledger, *st.decision, st.lr, *st.data,
                                                   std::max(st.last_train_end, st.step_issued_at), st.pos);
  st.last_train_end = r.wall_time;
  if (r.skipped) {
    if (st.rollback)
      spdlog::warn("step {}: a spike (loss {:.4f}, grad norm {:.4f}); update dropped, the run rolls back "
                   "(logging.on_spike ROLLBACK)",
                   r.step, r.loss, r.grad_norm);
    else if (st.spike_dropped)
      spdlog::warn("step {}: a spike (loss {:.4f}, grad norm {:.4f}); update dropped (logging.on_spike SKIP_UPDATE), "
                   "the LR schedule holds",
                   r.step, r.loss, r.grad_norm);
    else
      spdlog::warn("step {}: gradient norm is not finite ({}); update skipped, the LR schedule holds",
                   r.step, r.grad_norm);
  }
  r = st.args.book->add_step(r, ledger.sample_ids(), ledger.timings());
  if (auto rec = st.args.book->first_step_done()) {
    // Where the group resumed: a checkpoint directory, the state mirror in memory
    // (engine/state_mirror.h), or nothing (a fresh start).
    const std::string from = st.args.resume ? st.args.resume->dir() : std::string("the initial weights");
    spdlog::info("recovered: step {} done after restart {} on {} physical replica(s), resumed after step {} from {}; "
                 "{:.3f} s from the failure: detection {:.3f} s, restart {:.3f} s, reload {:.3f} s, re-warm {:.3f} s",
                 r.step, st.args.book->restarts(), st.topo.physical_replicas(), st.started_at, from, rec->total_s(),
                 rec->detection_s, rec->restart_s, rec->reload_s, rec->rewarm_s);
    // The placement the group came back on (smaller after a shrink, docs/cluster.md).
    event(self, "recovery", r.step,
          {{"restarts", st.args.book->restarts()},
           {"physical_replicas", int64_t(st.topo.physical_replicas())},
           {"resume_step", st.started_at},
           {"resumed_from", from},
           {"detection_s", rec->detection_s},
           {"restart_s", rec->restart_s},
           {"reload_s", rec->reload_s},
           {"rewarm_s", rec->rewarm_s}});
  }
  to_metrics(self, caf::make_message(r));
  to_metrics(self, caf::make_message(engine::step_extras(ledger, r, st.topo, st.microbatches,
                                                         st.args.config->batch().micro_batch_size(), *st.data)));
  st.ledger.reset();
  if (st.mirror) file_mirror(self, st.mirror->closed(r.step, st.pos));
  if (st.args.larger_placement_ready && st.args.larger_placement_ready()) feed(self, engine::RegroupRequested{});
  feed(self, engine::TrainStepClosed{r.step, st.pos.consumed_samples});
}

void finish_eval(Self* self) {
  auto& st = self->state;
  auto& ledger = *st.ledger;
  metrics::EvalRecord e = engine::close_eval(ledger, st.pos, st.args.config->batch().micro_batch_size(),
                                             st.valid ? &*st.valid : nullptr);
  e.time_s = seconds_since(st.step_start);
  e.wall_time = unix_now();
  st.args.book->add_eval(e);
  to_metrics(self, caf::make_message(e));
  st.ledger.reset();
  feed(self, engine::EvalClosed{});
}

// Called after every report: moves the step along when it can.
void progress(Self* self) {
  auto& st = self->state;
  st.last_progress = Clock::now();
  if (!st.ledger) return;
  auto& ledger = *st.ledger;
  // With logging.on_spike acting, the update waits for the loss too: the guard judges both.
  if (ledger.kind() == StepKind::Train && !st.decision && ledger.norms_complete() &&
      (!st.guard->active() || ledger.losses_complete())) {
    check_fault(self, ledger.step(), Fault::REDUCE);
    auto u = engine::decide_update(*st.args.config, ledger, *st.guard, *st.data, st.pos.consumed_samples,
                                   st.args.book->rollback_spikes());
    st.decision = u.clip;
    st.spike_dropped = u.spike_dropped;
    if (u.rollback) st.rollback = std::move(u.rollback);
    check_fault(self, ledger.step(), Fault::OPTIMIZER);
    // Read before the UpdateCommands go out: it dates a step handed over with them.
    feed(self, engine::UpdateDecided{ledger.step(), unix_now(), st.rollback.has_value()});
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
  auto outcome = st.args.book->outcome();
  metrics::RunSummary summary;
  for (const auto& r : outcome.steps) metrics::accumulate(summary, r);
  summary.status = status;
  summary.restarts = st.args.book->restarts();
  summary.rollbacks = int64_t(st.args.book->rollbacks().size());
  if (!outcome.evals.empty()) summary.last_eval_loss = outcome.evals.back().loss;
  summary.elapsed_s = st.args.book->elapsed_seconds();
  summary.wall_time = unix_now();
  summary.error = error;
  summary.newest_checkpoint = newest_checkpoint(st);
  st.args.book->finish(status, error, summary);
  to_metrics(self, caf::make_message(summary));
  if (st.client) self->send(st.client, finished_atom::value, st.args.book->outcome());
}

// ---- wiring --------------------------------------------------------------------

template <class Member>
void wire(Self* self, const Member& a, const Registry& peers, std::function<void()> then) {
  self->request(a, std::chrono::seconds(60), wire_atom::value, peers)
      .then([then](wired_atom) { then(); },
            [self](caf::error& e) {
              throw std::runtime_error("wiring the training group failed: " + self->system().render(e));
            });
}

// Looks up every member, wires them and starts once all have answered.
void wire_group(Self* self, const Registry& registry) {
  auto& st = self->state;
  const Peers peers(registry);
  st.stages.clear();
  st.optimizers.clear();
  st.loaders.clear();
  for (const auto& r : st.topo.all_ranks()) {
    st.stages.push_back(peers.stage(r));
    st.optimizers.push_back(peers.optimizer(r));
  }
  for (int32_t d = 0; d < st.topo.dp; ++d) st.loaders.push_back(peers.loader(d));
  auto pending = std::make_shared<size_t>(st.stages.size() + st.optimizers.size() + st.loaders.size());
  auto on_wired = [self, pending] {
    if (--*pending > 0) return;
    auto& s = self->state;
    s.started = true;
    s.args.book->group_ready();
    for (const auto& l : s.loaders)
      self->send(l, start_atom::value, s.pos.step + 1, s.pos.consumed_samples, s.total_steps);
    feed(self, engine::GroupWired{});
  };
  for (const auto& a : st.stages) wire(self, a, registry, on_wired);
  for (const auto& a : st.optimizers) wire(self, a, registry, on_wired);
  for (const auto& a : st.loaders) wire(self, a, registry, on_wired);
}

// A loader restarted on its own: it resumes at the step in flight (stages drop
// the microbatches they already consumed).
void rejoin_loader(Self* self, const std::string& path, const caf::actor& loader, const Registry& peers) {
  auto& st = self->state;
  int32_t dp = -1;
  for (int32_t d = 0; d < st.topo.dp; ++d)
    if (engine::loader_path(d) == path) dp = d;
  if (dp < 0) return;
  const auto typed_loader = typed_handle<loader_actor>(loader);
  st.loaders[size_t(dp)] = typed_loader;
  for (const auto& r : st.topo.all_ranks())
    if (r.dp == dp) self->send(st.stages[size_t(st.topo.index(r))], loader_atom::value, loader);
  const bool in_flight = st.ledger && st.ledger->kind() == StepKind::Train;
  const int64_t first = in_flight ? st.ledger->step() : st.pos.step + 1;
  const int64_t consumed = st.pos.consumed_samples;  // the step in flight starts here
  spdlog::info("{} restarted: resuming its stream at step {}", path, first);
  wire(self, typed_loader, peers, [self, typed_loader, first, consumed] {
    self->send(typed_loader, start_atom::value, first, consumed, self->state.total_steps);
  });
}

// ---- liveness --------------------------------------------------------------------

void watchdog(Self* self) {
  auto& st = self->state;
  const double limit = st.args.config->supervision().step_watchdog_s();
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

coordinator_actor::behavior_type coordinator_impl(Self* self, CoordinatorArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.client = typed_handle<run_client>(st.args.client);
  exit_on_exception(self, st.path);
  const Config& c = *st.args.config;
  st.topo = st.args.topo;
  st.schedule = std::make_unique<sched::LrSchedule>(c);
  st.microbatches = int32_t(config::microbatches_per_replica(c));
  st.total_steps = config::full_updates(c);
  st.eval_microbatches = int32_t(config::eval_microbatches_per_replica(c));
  st.ckpt_root = engine::checkpoint_root(c);
  st.data = data::BatchSource::open(c, data::Split::Train, st.args.skip_samples);
  if (c.training().eval_samples() > 0) {
    auto valid = data::BatchSource::open(c, data::Split::Valid);
    if (valid.blended()) st.valid = std::move(valid);
  }
  if (st.args.resume) st.pos = engine::position_of(st.args.resume->manifest());
  st.pos.datasets = engine::blend_position(*st.data, st.pos);
  st.started_at = st.pos.step;
  // A restarted group redoes the steps after its checkpoint: TensorBoard's marker.
  if (st.args.book->resume_from(st.pos.step) > 0 || !st.args.book->rollbacks().empty())
    to_metrics(self, caf::make_message(restart_marker_atom::value, st.pos.step, unix_now()));
  engine::StepDriverStart start;
  start.step = st.pos.step;
  start.consumed_samples = st.pos.consumed_samples;
  start.resumed = st.args.resume != nullptr;
  start.recovering = st.args.book->recovering();  // until this group's first step closes
  start.now = steady_now();
  st.driver.emplace(engine::step_driver_config(c), start);
  st.guard.emplace(c);
  if (st.args.mirror) {
    size_t shards = 0;
    for (const auto& r : st.topo.all_ranks()) shards += engine::writes_shard(c, r) ? 1 : 0;
    st.mirror.emplace(shards);
  }
  if (st.guard->active()) {
    // The windows of the timeline this group resumes: metrics.jsonl (steps of earlier
    // processes) with this process's own steps after it, so a record still on its way
    // to the file counts too; the last object of each step wins.
    std::vector<metrics::Json> lines;
    const auto path = metrics::run_dir_layout(c.logging().run_dir()).metrics;
    if (std::filesystem::exists(path)) lines = metrics::read_jsonl(path).objects;
    for (const auto& r : st.args.book->outcome().steps) lines.push_back(metrics::to_json(r));
    st.guard->warm(lines, st.pos.step);
  }
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
      [self](const msg::SnapshotTaken& t) { feed(self, t); },
      [self](const msg::ShardWritten& w) { feed(self, w); },
      [self](const msg::MirrorKept& k) {
        auto& s = self->state;
        // Steps up to this group's start are filed already (or of a timeline left).
        if (!s.mirror || k.timeline != s.args.mirror_timeline || k.step <= s.started_at) return;
        ShardFile record;
        if (!record.ParseFromString(k.record))
          throw std::runtime_error("the state mirror's record of " + engine::shard_file_name(k.rank) + " at step " +
                                   std::to_string(k.step) + " does not parse");
        file_mirror(self, s.mirror->kept(k.step, std::move(record), {k.rank, k.holders}));
      },
      [self](writer_down_atom, const std::string& path) { feed(self, engine::WriterDown{path}); },
      [self](storage_failed_atom, const std::string& error) { feed(self, engine::StorageFailed{error}); },
      [self, tick](tick_atom) {
        watchdog(self);
        feed(self, engine::Tick{});  // the save deadline
        self->delayed_send(self, tick, tick_atom::value);
      },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::event_based_actor* parent, CoordinatorArgs args) {
  return parent->spawn(coordinator_impl, std::move(args));
}

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }
int stop_signal() { return g_stop_signal.load(); }
void clear_stop() { g_stop_signal.store(0); }

}  // namespace troupe::actors
