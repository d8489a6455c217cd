#include "actors/stage_actor.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <optional>
#include <tuple>

#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/send_when_done.h"
#include "actors/unix_time.h"
#include "config/derived.h"
#include "engine/checkpointing.h"
#include "engine/stage_worker.h"
#include "engine/state_snapshot.h"
#include "sched/pipeline_schedule.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;
using msg::StepKind;

// Messages for one (kind, step, microbatch) wait here until their op runs.
using Key = std::tuple<StepKind, int64_t, int32_t>;

struct StageState {
  StageArgs args;
  std::string path;
  engine::Topology topo;
  // Shared with the messages that point into its buffers (msg::Activations::owner,
  // msg::GradShardReady::owner): they outlive this actor when a restart stops it.
  std::shared_ptr<engine::StageWorker> worker;
  std::vector<sched::PipelineOp> train_ops;

  coordinator_actor coordinator;
  optimizer_actor optimizer;
  loader_actor loader;
  stage_actor next, prev;

  // The step in progress.
  int64_t step = -1;
  // The next step, when the coordinator handed it over before this one finished
  // (it does so once an update is decided): started as soon as this one is done.
  std::optional<msg::RunStep> queued;
  // The previous step's StageDone, held while the queued step's ops run when its RunStep
  // allows (previous_done_may_wait): sent at the end of those ops, so that the stretch
  // from one step's update to the next step's first op sends nothing. On a machine whose
  // cores all compute, each send there wakes a thread, which costs this one its time
  // (measured: docs/performance.md, "Numbers the code's comments rely on").
  std::optional<msg::StageDone> held_done;
  Clock::time_point last_beat{};  // the last Heartbeat sent
  Clock::duration beat_period{};
  StepKind kind = StepKind::Train;
  std::vector<sched::PipelineOp> ops;
  size_t next_op = 0;
  bool waiting_for_update = false;
  Clock::time_point step_start;
  msg::StageTiming timing;
  Clock::time_point idle_since;

  // Training microbatches already consumed: a restarted loader re-sends the step
  // it was in, and those must not be stashed again.
  int64_t last_finished_step = 0;
  std::vector<bool> forwarded;  // this step's microbatches whose forward has run
  // An evaluation pass's microbatches whose activations the next stage (same process)
  // has copied out of this stage's output slot: the forward of mb + slots, which
  // rewrites that slot, waits for mb's (training needs none: the backward of mb, which
  // comes first, needs the next stage's gradient of mb).
  std::set<int32_t> eval_consumed;

  // Bookkeeping a training step owes others but nobody needs before its last op: the
  // last stage's loss reports and the credit of the step's last forward. Held until the
  // gradients go to the optimizer, because on a machine whose cores all compute, each
  // message wakes a thread that preempts a compute thread (one delayed participant
  // delays the whole op); after the last op the compute threads are idle.
  // Their loss sums are filled in from the read-back losses when sent (send_losses).
  struct HeldLoss {
    msg::LossReport report;
    int64_t rows = 0;  // tokens of the microbatch
  };
  std::vector<HeldLoss> held_losses;
  std::optional<int32_t> held_credit;
  int32_t last_train_forward = -1;  // the microbatch of train_ops' last forward op

  std::map<Key, std::shared_ptr<const data::Microbatch>> batches;
  std::map<Key, msg::Activations> inputs;
  std::map<Key, msg::Activations> grads;
};

using Self = stage_actor::stateful_base<StageState>;

double clock_seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

double since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

void maybe_fault(Self* self, Fault::Phase phase) {
  auto& st = self->state;
  engine::check_fault(st.args.faults.get(), st.path, st.step, phase);
}

// Poisons the gradients when a NAN_GRADIENT fault targets this microbatch.
void maybe_poison(Self* self, int32_t mb) {
  auto& st = self->state;
  if (!st.args.faults || !st.args.faults->targets(st.path)) return;
  auto this_mb = [mb](const Fault& f) { return f.kind() == Fault::NAN_GRADIENT && f.microbatch() == mb; };
  if (st.args.faults->take(st.path, st.step, Fault::BACKWARD, this_mb)) {
    spdlog::warn("{}: injected NaN gradient at step {} microbatch {}", st.path, st.step, mb);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    st.worker->device().copy_from_host(st.worker->model().grads(), &nan, sizeof nan);
  }
}

bool in_other_process(const stage_actor& peer, const caf::node_id& here) { return peer && peer.node() != here; }

// Whether an evaluation forward of `mb` may rewrite its output slot: the next stage,
// in this process, has copied out what the slot's previous microbatch left there.
bool eval_slot_free(const StageState& st, int32_t mb, const caf::node_id& here) {
  const int slots = st.worker->model().slots();
  if (st.kind != StepKind::Eval || st.worker->is_last() || mb < slots || in_other_process(st.next, here)) return true;
  return st.eval_consumed.count(mb - slots) > 0;
}

bool op_ready(const StageState& st, const sched::PipelineOp& op, const caf::node_id& here) {
  const Key key{st.kind, st.step, op.microbatch};
  if (op.kind == sched::OpKind::Forward)
    return st.batches.count(key) && (st.worker->is_first() || st.inputs.count(key)) &&
           eval_slot_free(st, op.microbatch, here);
  return st.worker->is_last() || st.grads.count(key);
}

// Tags of the pipeline-neighbour communicators: one FIFO per direction and kind.
enum PipelineTag : int { kForwardTag = 1, kEvalTag = 2, kBackwardTag = 3 };

bool in_other_process(Self* self, const stage_actor& peer) { return in_other_process(peer, self->node()); }

// Sends rows x cols values at `data` to a neighbour in another process; the message
// will carry only the shape. Over Gloo (host memory) once the device has finished
// writing them; over a device communicator (cluster mode on GPUs) issued on the
// device, nothing waited for: the receiver's own receive waits there. The output slot
// then stays unchanged until the peer has received it, since the slot is reused only
// after the backward that the peer's gradient enables; evaluation has no such
// backward, so `eval` makes the device's later work wait for the send.
msg::Activations send_via_comm(Self* self, const std::shared_ptr<comm::Communicator>& comm, int peer, int tag,
                               const float* data, int64_t rows, int64_t cols, bool eval = false) {
  if (!comm)
    throw std::logic_error(self->state.path +
                           ": a pipeline neighbour lives in another process but no communicator connects them");
  const std::span<const float> values{data, size_t(rows * cols)};
  if (comm->on_device()) {
    comm->issue_send(values, peer, tag);
    if (eval) comm->device_waits_for_issued();
  } else {
    self->state.worker->finish_device_work();
    comm->send(values, peer, tag);
  }
  msg::Activations a;
  a.rows = rows;
  a.cols = cols;
  a.via_comm = true;
  return a;
}

// Receives the values announced by a via_comm message as it arrives: over Gloo into
// host memory. A device communicator receives only when the op runs (input_of).
void receive_via_comm(Self* self, msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm, int peer,
                      int tag) {
  if (!comm)
    throw std::logic_error(self->state.path +
                           ": values came from another process but no pipeline communicator connects them");
  if (comm->on_device()) return;
  auto owned = std::make_shared<std::vector<float>>(size_t(a.rows * a.cols));
  comm->recv(*owned, peer, tag);
  a.data = owned->data();
  a.owner = std::move(owned);
}

// The values an op reads: a's, or, when a device communicator carries them, the
// stage's inbox for that side after the receive issued now. Receives are issued in op
// order, which is the order the neighbour sent them in (the same schedule), so each
// matches its send; the inbox is reused only after the op issued next has read it
// (one stream).
const float* input_of(Self* self, const msg::Activations& a, const std::shared_ptr<comm::Communicator>& comm,
                      int peer, int tag, engine::StageWorker::Inbox side) {
  if (a.data) return a.data;
  float* inbox = self->state.worker->inbox(side, a.rows * a.cols);
  comm->issue_recv({inbox, size_t(a.rows * a.cols)}, peer, tag);
  return inbox;
}

// Rows of the activations (and their gradients) a stage hands its neighbour for one
// microbatch; each row is width() floats.
int64_t activation_rows(const data::Microbatch& b) { return int64_t(b.batch) * b.seq; }

// `data` points into `stage`'s buffers (valid until the slot is rewritten).
msg::Activations handle(const std::shared_ptr<engine::StageWorker>& stage, const float* data,
                        const data::Microbatch& b) {
  msg::Activations a;
  a.rows = activation_rows(b);
  a.cols = stage->width();
  a.data = data;
  a.owner = stage;
  return a;
}

// Sends `m`, which points into this stage's device memory, once the device has written
// it (actors/send_when_done.h). Each kind of handed-over message goes to one receiver
// that gets nothing else from this stage, so sending some of them later never reorders
// a receiver's mail.
template <class Handle, class Msg>
void hand_over(Self* self, const Handle& to, Msg m) {
  send_when_done(self->state.worker->device(), to, std::move(m));
}

void run_forward(Self* self, int32_t mb) {
  auto& st = self->state;
  const Key key{st.kind, st.step, mb};
  maybe_fault(self, Fault::FORWARD);
  const auto& batch = st.batches.at(key);
  const float* input = nullptr;
  const int forward_tag = st.kind == StepKind::Eval ? kEvalTag : kForwardTag;
  if (!st.worker->is_first())
    input = input_of(self, st.inputs.at(key), st.args.comms.pipeline_prev, 0, forward_tag,
                     engine::StageWorker::Inbox::kActivations);
  const int64_t loss_tokens = st.worker->forward(mb, *batch, input);
  st.inputs.erase(key);
  if (st.kind == StepKind::Train) st.forwarded[size_t(mb)] = true;
  const auto& r = st.args.rank;
  if (st.worker->is_last()) {
    // Every tensor-parallel rank of the last stage computes the same loss (the
    // vocab-parallel cross-entropy combines its pieces): rank 0 reports it, after the
    // step's last op (send_losses).
    if (r.tp == 0)
      st.held_losses.push_back({msg::LossReport{st.step, st.kind, r.dp, mb, 0.0, loss_tokens, true},
                                activation_rows(*batch)});
  } else if (in_other_process(self, st.next)) {
    const auto out = send_via_comm(self, st.args.comms.pipeline_next, 1, forward_tag, st.worker->output(mb),
                                   activation_rows(*batch), st.worker->width(), st.kind == StepKind::Eval);
    self->send(st.next, msg::ActivationsReady{st.step, st.kind, mb, out});
  } else {
    hand_over(self, st.next, msg::ActivationsReady{st.step, st.kind, mb, handle(st.worker, st.worker->output(mb), *batch)});
  }
  // Evaluation has no backward to pace the previous stage's slots: once this device has
  // copied the input out (the forward's first kernel), that slot may be rewritten.
  if (st.kind == StepKind::Eval && !st.worker->is_first() && !in_other_process(self, st.prev))
    send_when_done(st.worker->device(), st.prev, eval_consumed_atom::value, st.step, mb);
  if (st.worker->is_first() && st.kind == StepKind::Train && r.tp == 0) {
    // The loader's next microbatch after the last forward belongs to the next step,
    // which starts only after this one's update: its credit can wait (held_credit).
    if (mb == st.last_train_forward)
      st.held_credit = mb;
    else
      self->send(st.loader, credit_atom::value, st.step, mb);
  }
  if (st.kind == StepKind::Eval) st.batches.erase(key);
}

void run_backward(Self* self, int32_t mb) {
  auto& st = self->state;
  const Key key{st.kind, st.step, mb};
  maybe_fault(self, Fault::BACKWARD);
  // Before the backward adds to the gradients (the NaN stays): after it, a bucket of the
  // last backward may already be on its way.
  maybe_poison(self, mb);
  const float* grad = st.worker->is_last()
                          ? nullptr
                          : input_of(self, st.grads.at(key), st.args.comms.pipeline_next, 1, kBackwardTag,
                                     engine::StageWorker::Inbox::kGradients);
  // The step's last op: its blocks' gradients are final as they are computed (buckets).
  st.worker->backward(mb, grad, /*last_of_step=*/st.next_op == st.ops.size());
  st.grads.erase(key);
  if (!st.worker->is_first()) {
    const auto& batch = *st.batches.at(key);
    if (in_other_process(self, st.prev)) {
      self->send(st.prev, msg::GradientsReady{st.step, mb,
                                              send_via_comm(self, st.args.comms.pipeline_prev, 0, kBackwardTag,
                                                            st.worker->input_grad(mb), activation_rows(batch),
                                                            st.worker->width())});
    } else {
      hand_over(self, st.prev, msg::GradientsReady{st.step, mb, handle(st.worker, st.worker->input_grad(mb), batch)});
    }
  }
  st.batches.erase(key);
}

void start_queued(Self* self);

// Sends the held loss reports, then `done` (if any), to the coordinator once the device
// has read this step's losses back: on a GPU from its completion callback, so this
// thread never waits for the read-back; on the CPU at once.
void send_losses(Self* self, std::optional<msg::StageDone> done = std::nullopt) {
  auto& st = self->state;
  if (st.held_losses.empty() && !done) return;
  st.worker->device().when_done([to = st.coordinator, losses = st.worker->losses(),
                                 held = std::move(st.held_losses), done = std::move(done)]() mutable {
    for (auto& h : held) {
      h.report.loss_sum = losses.sum(h.report.microbatch, h.rows);
      h.report.finite = std::isfinite(h.report.loss_sum);
      caf::anon_send(to, std::move(h.report));
    }
    if (done) caf::anon_send(to, std::move(*done));
  });
  st.held_losses.clear();
}

// After the step's gradient collectives: the gradients to the optimizer shard.
void gradients_reduced(Self* self, model::FlatRange range) {
  auto& st = self->state;
  // Before the gradients: the reports then reach the coordinator before anything the
  // optimizer shard sends about this step.
  send_losses(self);
  hand_over(self, st.optimizer,
            msg::GradShardReady{st.step, st.worker->model().grads(), st.worker->model().params(), range.begin,
                                range.end, st.worker});
  if (st.held_credit) self->send(st.loader, credit_atom::value, st.step, *st.held_credit);
  st.held_credit.reset();
}

// After the step's parameter all-gather: done; the next step starts if it is here.
void parameters_gathered(Self* self) {
  auto& s = self->state;
  s.timing.sync_s = s.worker->sync_seconds();
  s.timing.end_time = unix_now();
  const auto& r = s.args.rank;
  msg::StageDone done{s.step, s.kind, r.dp, r.pp, r.tp, std::move(s.timing)};
  if (s.queued && s.queued->previous_done_may_wait)
    s.held_done = std::move(done);
  else
    self->send(s.coordinator, std::move(done));
  s.last_finished_step = s.step;
  s.step = -1;
  s.waiting_for_update = false;
  start_queued(self);
}

// After the last op of a step: gradients to the optimizer (train), or done (eval).
void end_of_ops(Self* self) {
  auto& st = self->state;
  const auto& r = st.args.rank;
  // First: the coordinator closes that step while this one's update is prepared.
  if (st.held_done) self->send(st.coordinator, std::move(*st.held_done));
  st.held_done.reset();
  if (st.kind == StepKind::Eval) {
    st.timing.end_time = unix_now();
    // The losses first: the coordinator closes the pass on the last StageDone.
    send_losses(self, msg::StageDone{st.step, st.kind, r.dp, r.pp, r.tp, std::move(st.timing)});
    st.step = -1;
    start_queued(self);
    return;
  }
  maybe_fault(self, Fault::REDUCE);
  st.waiting_for_update = true;
  if (!st.worker->stages_collectives()) return gradients_reduced(self, st.worker->reduce_gradients());
  // On a GPU the collectives run on a host copy: once it has landed (a message from
  // the device's completion), not by waiting for it here.
  if (!st.worker->issue_gradients_to_host()) return gradients_reduced(self, st.worker->reduce_gradients_on_host());
  send_when_done(st.worker->device(), stage_actor{self}, grads_on_host_atom::value, st.step);
}

// A host copy of step `step` landed (grads_on_host_atom, params_on_host_atom): only
// ever for the step whose update this stage waits for.
void check_landed(const StageState& st, int64_t step, const char* what) {
  if (!st.waiting_for_update || step != st.step)
    throw std::logic_error(st.path + ": " + what + " of step " + std::to_string(step) + " landed out of turn");
}

// Runs every op whose inputs are here, in schedule order.
void advance(Self* self) {
  auto& st = self->state;
  if (st.step < 0 || st.waiting_for_update) return;
  while (st.next_op < st.ops.size() && op_ready(st, st.ops[st.next_op], self->node())) {
    const auto op = st.ops[st.next_op++];
    const auto t0 = Clock::now();
    st.timing.wait_s += since(st.idle_since, t0);
    st.timing.waits.push_back(since(st.idle_since, t0));
    if (op.kind == sched::OpKind::Forward)
      run_forward(self, op.microbatch);
    else
      run_backward(self, op.microbatch);
    const auto t1 = Clock::now();
    st.timing.busy.emplace_back(clock_seconds(t0), clock_seconds(t1));
    st.timing.backward.push_back(op.kind == sched::OpKind::Backward);
    st.timing.compute_s += since(t0, t1);
    st.idle_since = t1;
    // At most one beat per supervision.heartbeat_interval_s: each wakes the
    // coordinator's thread, which on a busy machine preempts a compute thread.
    if (t1 - st.last_beat >= st.beat_period) {
      st.last_beat = t1;
      self->send(st.coordinator, msg::Heartbeat{st.path, st.step});
    }
  }
  if (st.next_op == st.ops.size()) end_of_ops(self);
}

void start_step(Self* self, const msg::RunStep& rs) {
  auto& st = self->state;
  if (st.step >= 0) {
    if (st.queued)
      throw std::logic_error(st.path + ": step " + std::to_string(rs.step) + " handed over while step " +
                             std::to_string(st.step) + " runs and step " + std::to_string(st.queued->step) +
                             " waits");
    st.queued = rs;
    return;
  }
  st.step = rs.step;
  st.kind = rs.kind;
  st.next_op = 0;
  st.waiting_for_update = false;
  st.timing = {};
  st.step_start = st.idle_since = Clock::now();
  st.worker->reserve_losses(rs.microbatches);
  if (rs.kind == StepKind::Train) {
    st.ops = st.train_ops;
    st.forwarded.assign(size_t(rs.microbatches), false);
    st.worker->begin_step();
  } else {
    st.ops.clear();
    for (int32_t i = 0; i < rs.microbatches; ++i) st.ops.push_back({sched::OpKind::Forward, i});
    st.eval_consumed.clear();
  }
  advance(self);
}

// The step handed over while the previous one ran, if any.
void start_queued(Self* self) {
  auto& st = self->state;
  if (!st.queued) return;
  const auto rs = *st.queued;
  st.queued.reset();
  start_step(self, rs);
}

stage_actor::behavior_type stage_impl(Self* self, StageArgs args) {
  auto& st = self->state;
  st.path = engine::stage_path(args.rank);
  st.topo = engine::Topology::of(args.config);
  st.args = std::move(args);
  exit_on_exception(self, st.path);
  const auto& c = st.args.config;
  if (st.args.connect_comms) st.args.comms = st.args.connect_comms();
  st.worker = std::make_shared<engine::StageWorker>(c, st.args.rank, st.args.comms, st.args.device);
  st.beat_period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(c.supervision().heartbeat_interval_s()));
  if (st.args.resume) {
    engine::restore_stage(*st.args.resume, st.worker->model());
    st.last_finished_step = st.args.resume->step();
  }
  st.train_ops = sched::build_pipeline_schedule(c.parallel().schedule(), c.parallel().pipeline(),
                                                int32_t(config::microbatches_per_replica(c)))
                     .ops[size_t(st.args.rank.pp)];
  for (const auto& op : st.train_ops)
    if (op.kind == sched::OpKind::Forward) st.last_train_forward = op.microbatch;
  return {
      [self](wire_atom, const Registry& peers) {
        auto& s = self->state;
        const auto& r = s.args.rank;
        s.coordinator = typed_handle<coordinator_actor>(peers.at(engine::coordinator_path()));
        s.optimizer = typed_handle<optimizer_actor>(peers.at(engine::optim_path(r)));
        s.loader = typed_handle<loader_actor>(peers.at(engine::loader_path(r.dp)));
        if (r.pp + 1 < s.topo.pp) s.next = typed_handle<stage_actor>(peers.at(engine::stage_path({r.dp, r.pp + 1, r.tp})));
        if (r.pp > 0) s.prev = typed_handle<stage_actor>(peers.at(engine::stage_path({r.dp, r.pp - 1, r.tp})));
        return wired_atom::value;
      },
      [self](const msg::RunStep& rs) { start_step(self, rs); },
      [self](const msg::MicrobatchReady& m) {
        auto& s = self->state;
        if (m.kind == StepKind::Train &&
            (m.step <= s.last_finished_step ||
             (m.step == s.step && s.kind == StepKind::Train && s.forwarded[size_t(m.microbatch)]))) {
          // A restarted loader's repeat of what was already consumed: dropped, but its
          // credit goes back so that the loader's window keeps moving.
          if (s.worker->is_first() && s.args.rank.tp == 0) self->send(s.loader, credit_atom::value, m.step, m.microbatch);
          return;
        }
        s.batches[{m.kind, m.step, m.microbatch}] = m.batch;
        advance(self);
      },
      [self](loader_atom, const caf::actor& loader) { self->state.loader = typed_handle<loader_actor>(loader); },
      [self](msg::ActivationsReady& a) {
        auto& s = self->state;
        if (a.x.via_comm)
          receive_via_comm(self, a.x, s.args.comms.pipeline_prev, 0, a.kind == StepKind::Eval ? kEvalTag : kForwardTag);
        s.inputs[{a.kind, a.step, a.microbatch}] = a.x;
        advance(self);
      },
      [self](eval_consumed_atom, int64_t step, int32_t mb) {
        auto& s = self->state;
        if (s.kind != StepKind::Eval || step != s.step) return;  // a pass already over
        s.eval_consumed.insert(mb);
        advance(self);
      },
      [self](msg::GradientsReady& g) {
        auto& s = self->state;
        if (g.dx.via_comm) receive_via_comm(self, g.dx, s.args.comms.pipeline_next, 1, kBackwardTag);
        s.grads[{StepKind::Train, g.step, g.microbatch}] = g.dx;
        advance(self);
      },
      [self](const msg::ShardApplied& a) {
        auto& s = self->state;
        if (!s.waiting_for_update || a.step != s.step)
          throw std::logic_error(s.path + ": unexpected ShardApplied for step " + std::to_string(a.step));
        if (!s.worker->stages_collectives()) {
          s.worker->gather_parameters();
          return parameters_gathered(self);
        }
        if (!s.worker->issue_parameters_to_host()) return parameters_gathered(self);
        send_when_done(s.worker->device(), stage_actor{self}, params_on_host_atom::value, s.step);
      },
      [self](grads_on_host_atom, int64_t step) {
        check_landed(self->state, step, "gradients");
        gradients_reduced(self, self->state.worker->reduce_gradients_on_host());
      },
      [self](params_on_host_atom, int64_t step) {
        check_landed(self->state, step, "parameters");
        self->state.worker->gather_parameters_on_host();
        parameters_gathered(self);
      },
      [self](snapshot_atom) {
        auto& s = self->state;
        auto& model = s.worker->model();
        return engine::StageSnapshot{s.args.rank, model.registry().tensors(),
                                     kernels::download(s.worker->device(), model.params(), size_t(model.param_count()))};
      },
  };
}

}  // namespace

stage_actor spawn_stage(caf::event_based_actor* parent, StageArgs args) {
  return parent->spawn<caf::detached>(stage_impl, std::move(args));
}

}  // namespace troupe::actors
