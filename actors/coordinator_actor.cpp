#include "actors/coordinator_actor.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "config/derived.h"
#include "engine/step_ledger.h"
#include "optim/grad_clip.h"
#include "sched/lr_schedule.h"

namespace troupe::actors {
namespace {

std::atomic<int> g_stop_signal{0};

using Clock = std::chrono::steady_clock;
using msg::StepKind;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct CoordinatorState {
  CoordinatorArgs args;
  engine::Topology topo;
  std::unique_ptr<sched::LrSchedule> schedule;
  Registry peers;
  std::vector<caf::actor> stages, optimizers, loaders;  // rank / dp order
  int32_t microbatches = 0;
  int64_t total_steps = 0;
  int32_t eval_microbatches = 0;  // per replica, 0: no validation

  // Counters after the last finished training step.
  int64_t step = 0, consumed = 0, successful = 0, skipped = 0;

  // The step in flight.
  std::optional<engine::StepLedger> ledger;
  std::optional<optim::ClipDecision> decision;
  double lr = 0;
  Clock::time_point step_start;
  int64_t evals_run = 0;
  int64_t last_eval_step = -1;

  // Loaders run ahead: counts of a step that has not started yet wait here.
  std::vector<msg::ReplicaCounts> early_counts;

  RunOutcome outcome;
  Clock::time_point run_start = Clock::now();
  bool done = false;
};

using Self = caf::stateful_actor<CoordinatorState>;

void finish_run(Self* self, std::string status, std::string error = {});
void begin_train_step(Self* self);

void to_metrics(Self* self, caf::message m) {
  if (self->state.args.metrics) self->send(self->state.args.metrics, std::move(m));
}

void begin_eval(Self* self) {
  auto& st = self->state;
  const int64_t id = ++st.evals_run;
  st.ledger.emplace(st.topo, StepKind::Eval, id, st.eval_microbatches);
  st.decision.reset();
  st.step_start = Clock::now();
  st.last_eval_step = st.step;
  const msg::RunStep rs{id, StepKind::Eval, 0, st.eval_microbatches};
  for (const auto& l : st.loaders) self->send(l, rs);
  for (const auto& s : st.stages) self->send(s, rs);
}

// What comes after a finished training or evaluation step.
void next(Self* self) {
  auto& st = self->state;
  const bool eval_due = st.eval_microbatches > 0 && st.last_eval_step != st.step &&
                        ((st.args.config.training().eval_interval() > 0 &&
                          st.step % st.args.config.training().eval_interval() == 0) ||
                         st.step == st.total_steps);
  if (int sig = g_stop_signal.load()) {
    finish_run(self, "interrupted", fmt::format("signal {}", sig));
    return;
  }
  if (eval_due) {
    begin_eval(self);
    return;
  }
  if (st.step < st.total_steps) {
    begin_train_step(self);
    return;
  }
  finish_run(self, "completed");
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
  st.consumed += counts.samples;
  r.consumed_samples = st.consumed;
  r.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  r.lr = st.lr;
  r.grad_norm = st.decision->norm;
  r.clipped = st.decision->clipped;
  r.skipped = st.decision->skip;
  r.input_tokens = counts.input_tokens;
  r.loss_tokens = counts.loss_tokens;
  r.padding_tokens = counts.padding_tokens;
  r.step_time_s = std::chrono::duration<double>(Clock::now() - st.step_start).count();
  r.wall_time = unix_now();
  st.step = r.step;
  if (r.skipped) {
    ++st.skipped;
    spdlog::warn("step {}: gradient norm is not finite ({}); update skipped, the LR schedule holds",
                 r.step, r.grad_norm);
  } else {
    ++st.successful;
  }
  metrics::accumulate(st.outcome.summary, r);
  st.outcome.steps.push_back(r);
  st.outcome.step_samples.push_back(ledger.sample_ids());
  to_metrics(self, caf::make_message(r));
  st.ledger.reset();
  next(self);
}

void finish_eval(Self* self) {
  auto& st = self->state;
  auto& ledger = *st.ledger;
  const auto counts = ledger.counts();
  metrics::EvalRecord e;
  e.step = st.step;
  e.consumed_samples = st.consumed;
  e.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  e.samples = counts.samples;
  e.loss_tokens = counts.loss_tokens;
  e.time_s = std::chrono::duration<double>(Clock::now() - st.step_start).count();
  e.wall_time = unix_now();
  st.outcome.summary.last_eval_loss = e.loss;
  st.outcome.evals.push_back(e);
  to_metrics(self, caf::make_message(e));
  st.ledger.reset();
  next(self);
}

void begin_train_step(Self* self) {
  auto& st = self->state;
  st.ledger.emplace(st.topo, StepKind::Train, st.step + 1, st.microbatches);
  st.decision.reset();
  st.lr = st.schedule->lr_for_update(st.successful);
  st.step_start = Clock::now();
  const msg::RunStep rs{st.step + 1, StepKind::Train, st.consumed, st.microbatches};
  for (const auto& s : st.stages) self->send(s, rs);
  auto early = std::move(st.early_counts);
  st.early_counts.clear();
  for (auto& c : early) {
    if (c.step == rs.step)
      st.ledger->add(c);
    else
      st.early_counts.push_back(std::move(c));
  }
}

// Called after every report: moves the step along when it can.
void progress(Self* self) {
  auto& st = self->state;
  if (!st.ledger) return;
  auto& ledger = *st.ledger;
  if (ledger.kind() == StepKind::Train && !st.decision && ledger.norms_complete()) {
    st.decision = optim::decide(ledger.total_sum_squares(), st.args.config.optimizer().clip_grad());
    const msg::UpdateCommand cmd{ledger.step(), st.lr, st.decision->factor, st.decision->skip};
    for (const auto& o : st.optimizers) self->send(o, cmd);
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
  st.outcome.status = std::move(status);
  st.outcome.error = std::move(error);
  st.outcome.summary.status = st.outcome.status;
  st.outcome.summary.elapsed_s = std::chrono::duration<double>(Clock::now() - st.run_start).count();
  st.outcome.summary.wall_time = unix_now();
  to_metrics(self, caf::make_message(st.outcome.summary));
  if (st.args.client) self->send(st.args.client, finished_atom::value, st.outcome);
}

// Looks up every member, wires them and starts once all have answered.
void wire_group(Self* self, const Registry& peers) {
  auto& st = self->state;
  st.peers = peers;
  st.stages.clear();
  st.optimizers.clear();
  st.loaders.clear();
  for (const auto& r : st.topo.all_ranks()) {
    st.stages.push_back(peers.at(engine::stage_path(r)));
    st.optimizers.push_back(peers.at(engine::optim_path(r)));
  }
  for (int32_t d = 0; d < st.topo.dp; ++d) st.loaders.push_back(peers.at(engine::loader_path(d)));
  auto pending = std::make_shared<size_t>(st.stages.size() + st.optimizers.size() + st.loaders.size());
  auto wire = [self, pending, peers](const caf::actor& a) {
    self->request(a, std::chrono::seconds(60), wire_atom::value, peers)
        .then(
            [self, pending](wired_atom) {
              if (--*pending > 0) return;
              auto& s = self->state;
              for (const auto& l : s.loaders)
                self->send(l, start_atom::value, s.step + 1, s.consumed, s.total_steps);
              next(self);
            },
            [self](caf::error& e) {
              throw std::runtime_error("wiring the training group failed: " + self->system().render(e));
            });
  };
  for (const auto& a : st.stages) wire(a);
  for (const auto& a : st.optimizers) wire(a);
  for (const auto& a : st.loaders) wire(a);
}

caf::behavior coordinator_impl(Self* self, CoordinatorArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, engine::coordinator_path());
  const auto& c = st.args.config;
  st.topo = engine::Topology::of(c);
  st.schedule = std::make_unique<sched::LrSchedule>(c);
  st.microbatches = int32_t(config::microbatches_per_replica(c));
  st.total_steps = config::full_updates(c);
  const int64_t per_replica_rows = int64_t(c.batch().micro_batch_size()) * c.parallel().data();
  st.eval_microbatches = int32_t(c.training().eval_samples() / per_replica_rows);
  return {
      [self](wire_atom, const Registry& peers) { wire_group(self, peers); },
      [self](const msg::LossReport& r) {
        self->state.ledger->add(r);
        progress(self);
      },
      [self](msg::ReplicaCounts& r) {
        auto& s = self->state;
        if (r.kind == StepKind::Train && (!s.ledger || s.ledger->kind() != StepKind::Train ||
                                          s.ledger->step() != r.step)) {
          s.early_counts.push_back(std::move(r));
          return;
        }
        s.ledger->add(r);
        progress(self);
      },
      [self](const msg::NormPartial& r) {
        self->state.ledger->add(r);
        progress(self);
      },
      [self](const msg::StageDone& r) {
        self->state.ledger->add(r);
        progress(self);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::event_based_actor* parent, CoordinatorArgs args) {
  return parent->spawn(coordinator_impl, std::move(args));
}

void request_stop(int signal_number) { g_stop_signal.store(signal_number); }
int stop_signal() { return g_stop_signal.load(); }

}  // namespace troupe::actors
