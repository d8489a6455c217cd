#include "actors/stage_actor.h"

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <optional>
#include <tuple>

#include "actors/message_types.h"
#include "actors/peers.h"
#include "actors/send_when_done.h"
#include "actors/unix_time.h"
#include "engine/checkpointing.h"
#include "engine/pipeline_transport.h"
#include "engine/stage_worker.h"
#include "engine/state_snapshot.h"
#include "sched/pipeline_schedule.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;
using msg::StepKind;

// Microbatches for one (kind, step, microbatch) wait here until their last op has run;
// activations and gradients for one (kind, step, microbatch, chunk) until their op runs.
using Key = std::tuple<StepKind, int64_t, int32_t>;
using ChunkKey = std::tuple<StepKind, int64_t, int32_t, int32_t>;

struct StageState {
  StageArgs args;
  std::string path;
  engine::Topology topo;
  // Shared with the messages that point into its buffers (msg::Activations::owner,
  // msg::GradShardReady::owner): they outlive this actor when a restart stops it.
  std::shared_ptr<engine::StageWorker> worker;
  // Which carrier takes activations to and from the neighbours (set up with the worker;
  // told where they live when wired).
  std::optional<engine::PipelineTransport> transport;
  // The verified schedule (every stage's lists: an op's neighbour is op_source /
  // op_destination of it) and this stage's own list.
  sched::PipelineSchedule schedule;
  std::vector<sched::PipelineOp> train_ops;
  // Per op of train_ops: whether it is its chunk's last backward of the step (its
  // blocks' gradients are final after it: StageWorker::backward's buckets), or under
  // the split backward (ZB_H1) the step's last weight pass.
  std::vector<bool> last_of_chunk;

  coordinator_actor coordinator;
  optimizer_actor optimizer;
  loader_actor loader;
  stage_actor next, prev;

  // A physical rank hosting several logical ones (engine::Topology::hosts_several): this
  // logical rank is turn `round` of `rounds` on the shared stage. It runs the ops of its
  // n-th RunStep (seq, counted from 0) only once it has the turn for n (turn_seq >= n):
  // round 0 has it for its first, then from the last round when a step is over; round
  // j > 0 from round j - 1 when its ops are done (turn_atom). The last round, once every
  // round has contributed, tells the earlier ones the sums are in (reduced_atom).
  bool hosted = false;
  int32_t round = 0, rounds = 1;
  int64_t seq = -1, turn_seq = 0;
  bool round_begun = false;
  stage_actor next_round, first_round;
  std::vector<stage_actor> earlier_rounds;
  // An evaluation pass has no backward to pace the slots: its outputs handed to the next
  // stage (this pass), and a finished pass whose turn waits until the next stage has
  // copied every one of them out (the next round would rewrite the shared slots).
  size_t eval_handed = 0;
  struct EvalTurn {
    int64_t step = -1;
    size_t handed = 0, consumed = 0;
  };
  std::optional<EvalTurn> eval_turn;

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
  // How this step's update is decided (its RunStep's; passed on to the shard).
  msg::UpdateRule update_rule;
  // What the optimizer shard's ShardApplied said of this step's update (for StageDone).
  msg::UpdateSums update_sums;
  msg::UpdateCommand update_applied;
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
  // An evaluation pass's (microbatch, chunk)s whose activations the next stage (same
  // process) has copied out of this stage's output slot: the forward of mb + slots,
  // which rewrites that slot, waits for mb's (training needs none: the backward of mb,
  // which comes first, needs the next stage's gradient of mb).
  std::set<std::pair<int32_t, int32_t>> eval_consumed;

  // Bookkeeping a training step owes others but nobody needs before its last op: the
  // last stage's loss reports and the credit of the step's last forward. Held until the
  // gradients go to the optimizer, because on a machine whose cores all compute, each
  // message wakes a thread that preempts a compute thread (one delayed participant
  // delays the whole op); after the last op the compute threads are idle.
  // Their loss sums are filled in from the read-back losses when sent (send_losses).
  struct HeldLoss {
    msg::LossReport report;
    int64_t rows = 0;  // tokens of the microbatch
    // Train: the microbatch itself, whose segments and loss mask split its losses by
    // packed segment (LossReport::segments); null for evaluation.
    std::shared_ptr<const data::Microbatch> batch;
  };
  std::vector<HeldLoss> held_losses;
  std::optional<int32_t> held_credit;
  int32_t last_train_forward = -1;  // the microbatch of train_ops' last forward of chunk 0

  std::map<Key, std::shared_ptr<const data::Microbatch>> batches;
  std::map<ChunkKey, msg::Activations> inputs;
  std::map<ChunkKey, msg::Activations> grads;
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

// Tells the transport where the neighbours live once they are wired.
bool in_other_process(const stage_actor& peer, const caf::node_id& here) { return peer && peer.node() != here; }

// Whether an evaluation forward of (mb, chunk) may rewrite its output slot: the next
// stage, in this process, has copied out what the slot's previous microbatch left there.
bool eval_slot_free(const StageState& st, int32_t mb, int32_t chunk) {
  const int slots = st.worker->model().chunk_slots(chunk);
  if (st.kind != StepKind::Eval || st.worker->chunk_is_last(chunk) || mb < slots || st.transport->next_remote())
    return true;
  return st.eval_consumed.count({mb - slots, chunk}) > 0;
}

bool op_ready(const StageState& st, const sched::PipelineOp& op) {
  // A weight pass reads only its own stage's slot, which its backward (earlier in the
  // list: sched/schedule_verifier.h) filled.
  if (op.kind == sched::OpKind::Weight) return true;
  const Key key{st.kind, st.step, op.microbatch};
  const ChunkKey chunk_key{st.kind, st.step, op.microbatch, op.chunk};
  if (op.kind == sched::OpKind::Forward)
    return st.batches.count(key) && (st.worker->chunk_is_first(op.chunk) || st.inputs.count(chunk_key)) &&
           eval_slot_free(st, op.microbatch, op.chunk);
  return st.worker->chunk_is_last(op.chunk) || st.grads.count(chunk_key);
}

// The chunk of the neighbour's op that takes what `op` of this stage hands over.
int32_t destination_chunk(const StageState& st, const sched::PipelineOp& op) {
  return sched::op_destination(st.schedule, st.args.rank.pp, op).op.chunk;
}

// Sends `m`, which points into this stage's device memory, once the device has written
// it (actors/send_when_done.h). Each kind of handed-over message goes to one receiver
// that gets nothing else from this stage, so sending some of them later never reorders
// a receiver's mail.
template <class Handle, class Msg>
void hand_over(Self* self, const Handle& to, Msg m) {
  send_when_done(self->state.worker->device(), to, std::move(m));
}

// Sends a neighbour `m` (msg::ActivationsReady or msg::GradientsReady, from the
// transport): at once when a communicator carried the values (nothing of this stage's
// memory travels), else handed over once the device has written them.
template <class Msg>
void to_neighbour(Self* self, const stage_actor& to, Msg m, bool via_comm) {
  if (via_comm)
    self->send(to, std::move(m));
  else
    hand_over(self, to, std::move(m));
}

void run_forward(Self* self, const sched::PipelineOp& op) {
  auto& st = self->state;
  const int32_t mb = op.microbatch, chunk = op.chunk;
  const Key key{st.kind, st.step, mb};
  const ChunkKey chunk_key{st.kind, st.step, mb, chunk};
  maybe_fault(self, Fault::FORWARD);
  const auto& batch = st.batches.at(key);
  const bool first = st.worker->chunk_is_first(chunk);
  const float* input = first ? nullptr : st.transport->recv_forward(st.kind, st.inputs.at(chunk_key));
  const int64_t loss_tokens = st.worker->forward(mb, *batch, input, chunk);
  st.inputs.erase(chunk_key);
  if (st.kind == StepKind::Train) st.forwarded[size_t(mb)] = true;
  const auto& r = st.args.rank;
  if (st.worker->chunk_is_last(chunk)) {
    // Every tensor-parallel rank of the last stage computes the same loss (the
    // vocab-parallel cross-entropy combines its pieces): rank 0 reports it, after the
    // step's last op (send_losses), with its sums by packed segment (a training step's
    // spike record, an evaluation's loss per dataset of a blend).
    if (r.tp == 0)
      st.held_losses.push_back({msg::LossReport{st.step, st.kind, r.dp, mb, 0.0, loss_tokens, true, {}},
                                int64_t(batch->batch) * batch->seq, batch});
  } else {
    if (st.kind == StepKind::Eval) ++st.eval_handed;
    auto out = st.transport->send_forward(st.kind, mb, *batch, chunk);
    const bool via_comm = out.via_comm;
    to_neighbour(self, st.next,
                 msg::ActivationsReady{st.step, st.kind, mb, std::move(out), destination_chunk(st, op)}, via_comm);
  }
  // Evaluation has no backward to pace the previous stage's slots: once this device has
  // copied the input out (the forward's first kernel), that slot may be rewritten.
  if (st.kind == StepKind::Eval && !first && !st.transport->prev_remote())
    send_when_done(st.worker->device(), st.prev, eval_consumed_atom::value, st.step, mb,
                   sched::op_source(st.schedule, r.pp, op).op.chunk);
  if (first && st.kind == StepKind::Train && r.tp == 0) {
    // The loader's next microbatch after the last forward belongs to the next step,
    // which starts only after this one's update: its credit can wait (held_credit).
    if (mb == st.last_train_forward)
      st.held_credit = mb;
    else
      self->send(st.loader, credit_atom::value, st.step, mb);
  }
  // Its last op on this stage: the last chunk's forward.
  if (st.kind == StepKind::Eval && chunk == st.worker->chunks() - 1) st.batches.erase(key);
}

void run_backward(Self* self, const sched::PipelineOp& op, bool last_of_chunk) {
  auto& st = self->state;
  const int32_t mb = op.microbatch, chunk = op.chunk;
  const Key key{st.kind, st.step, mb};
  const ChunkKey chunk_key{st.kind, st.step, mb, chunk};
  maybe_fault(self, Fault::BACKWARD);
  // Before the backward adds to the gradients (the NaN stays): after it, a bucket of the
  // last backward may already be on its way.
  engine::inject_nan_gradient(st.args.faults.get(), st.path, st.step, mb, st.worker->device(),
                              st.worker->model().grads());
  const float* grad = st.worker->chunk_is_last(chunk) ? nullptr : st.transport->recv_backward(st.grads.at(chunk_key));
  // The chunk's last backward of the step: its blocks' gradients are final as they are
  // computed (buckets). Under the split backward this is the input pass; the weight
  // GEMMs wait for the op's weight pass (run_weight).
  if (st.worker->split_backward())
    st.worker->backward_input(mb, grad);
  else
    st.worker->backward(mb, grad, last_of_chunk, chunk);
  st.grads.erase(chunk_key);
  if (!st.worker->chunk_is_first(chunk)) {
    auto dx = st.transport->send_backward(mb, *st.batches.at(key), chunk);
    const bool via_comm = dx.via_comm;
    to_neighbour(self, st.prev, msg::GradientsReady{st.step, mb, std::move(dx), destination_chunk(st, op)},
                 via_comm);
  }
  // Its last op on this stage: chunk 0's backward (every other chunk's comes before it).
  if (chunk == 0) st.batches.erase(key);
}

// ZB_H1's weight pass of a microbatch: the weight gradients its backward_input left
// for later. Nothing is handed over; the step's last one makes the gradients final.
void run_weight(Self* self, const sched::PipelineOp& op, bool last_of_step) {
  self->state.worker->backward_weight(op.microbatch, last_of_step);
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
      if (h.batch) h.report.segments = losses.segments(h.report.microbatch, *h.batch);
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
                                range.end, st.worker, st.update_rule});
  if (st.held_credit) self->send(st.loader, credit_atom::value, st.step, *st.held_credit);
  st.held_credit.reset();
}

// Hosted replicas: the turn on the shared stage passes on once this replica's ops of
// its current RunStep are done (to the next round), or the step is over (from the last
// round to round 0, for the next RunStep).
void pass_turn(Self* self, bool step_over) {
  auto& st = self->state;
  if (!st.hosted) return;
  if (!step_over && st.round + 1 < st.rounds) self->send(st.next_round, turn_atom::value, st.seq);
  if (step_over && st.round + 1 == st.rounds) self->send(st.first_round, turn_atom::value, st.seq + 1);
}

// A hosted replica's finished evaluation pass: the turn passes once the next stage has
// copied out every output this pass handed it.
void pass_eval_turn(Self* self) {
  auto& st = self->state;
  if (!st.eval_turn || st.eval_turn->consumed < st.eval_turn->handed) return;
  st.eval_turn.reset();
  pass_turn(self, /*step_over=*/false);
  pass_turn(self, /*step_over=*/true);
}

// After the step's parameter all-gather: done; the next step starts if it is here.
void parameters_gathered(Self* self) {
  auto& s = self->state;
  s.timing.sync_s = s.worker->sync_seconds();
  s.timing.end_time = unix_now();
  s.timing.memory = s.worker->memory_peak();
  const auto& r = s.args.rank;
  msg::StageDone done{s.step, s.kind, r, std::move(s.timing), s.update_sums, s.update_applied};
  if (s.queued && s.queued->previous_done_may_wait)
    s.held_done = std::move(done);
  else
    self->send(s.coordinator, std::move(done));
  s.last_finished_step = s.step;
  s.step = -1;
  s.waiting_for_update = false;
  pass_turn(self, /*step_over=*/true);
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
    send_losses(self, msg::StageDone{st.step, st.kind, r, std::move(st.timing), {}, {}});
    if (st.hosted) {
      st.eval_turn = StageState::EvalTurn{st.step, st.eval_handed, st.eval_consumed.size()};
      pass_eval_turn(self);
    }
    st.step = -1;
    start_queued(self);
    return;
  }
  maybe_fault(self, Fault::REDUCE);
  st.waiting_for_update = true;
  if (st.hosted) {
    // This replica's addition to the ordered reduction, then the next round's turn; the
    // last round puts the sums into the shared buffer and tells the earlier rounds.
    st.worker->contribute_gradients();
    pass_turn(self, /*step_over=*/false);
    if (st.round + 1 < st.rounds) return;  // reduced_atom comes
    st.worker->finish_reduction();
    for (const auto& earlier : st.earlier_rounds) self->send(earlier, reduced_atom::value, st.step);
    return gradients_reduced(self, st.worker->shard_range());
  }
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
  if (st.hosted) {
    if (st.turn_seq < st.seq) return;  // another round has the shared stage
    if (st.kind == StepKind::Train && !st.round_begun) st.worker->begin_round(st.round == 0);
    st.round_begun = true;
  }
  while (st.next_op < st.ops.size() && op_ready(st, st.ops[st.next_op])) {
    const size_t index = st.next_op++;
    const auto op = st.ops[index];
    const auto t0 = Clock::now();
    st.timing.wait_s += since(st.idle_since, t0);
    st.timing.waits.push_back(since(st.idle_since, t0));
    const bool last_of_chunk = st.kind == StepKind::Train && st.last_of_chunk[index];
    if (op.kind == sched::OpKind::Forward)
      run_forward(self, op);
    else if (op.kind == sched::OpKind::Backward)
      run_backward(self, op, last_of_chunk);
    else
      run_weight(self, op, last_of_chunk);
    const auto t1 = Clock::now();
    st.timing.busy.emplace_back(clock_seconds(t0), clock_seconds(t1));
    st.timing.op_kinds.push_back(uint8_t(op.kind));
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
  ++st.seq;
  st.round_begun = false;
  st.update_rule = rs.update;
  st.next_op = 0;
  st.waiting_for_update = false;
  st.timing = {};
  st.step_start = st.idle_since = Clock::now();
  st.worker->reserve_losses(rs.microbatches);
  if (rs.kind == StepKind::Train) {
    st.ops = st.train_ops;
    st.forwarded.assign(size_t(rs.microbatches), false);
    if (!st.hosted) st.worker->begin_step();  // hosted: when its turn comes (advance)
  } else {
    st.ops = sched::forward_pass_order(st.topo.pp, rs.microbatches, st.worker->chunks());
    st.eval_consumed.clear();
    st.eval_handed = 0;
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
  st.topo = args.topo;
  st.args = std::move(args);
  exit_on_exception(self, st.path);
  const engine::StageSpec& spec = *st.args.spec;
  if (st.args.connect_comms) st.args.comms = st.args.connect_comms();
  st.worker = std::make_shared<engine::StageWorker>(spec, st.args.comms, st.args.device);
  st.transport.emplace(st.path, st.worker, st.args.comms.pipeline_prev, st.args.comms.pipeline_next);
  st.beat_period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.heartbeat_interval_s));
  st.hosted = st.worker->hosted();
  st.round = st.topo.round_of(st.args.rank);
  st.rounds = st.topo.hosted();
  st.turn_seq = st.round == 0 ? 0 : -1;
  if (st.args.resume) {
    // A shared stage's weights are loaded once, by the hosted rank that made it.
    if (st.worker->made_model()) engine::restore_stage(*st.args.resume, st.worker->model());
    st.last_finished_step = st.args.resume->step();
  } else if (!spec.init_from.empty() && st.worker->made_model()) {
    // A fresh start from a Hugging Face model: this rank maps the files and reads
    // only its own boxes of them (run_training checked the directory before).
    engine::init_stage_from_hf(engine::open_init_from(spec.init_from, spec.model.model), st.worker->model());
  }
  // The same verified lists run_training checked before starting the actors
  // (sched/schedule_verifier.h): this stage walks exactly its own.
  st.schedule = *spec.schedule;
  st.train_ops = st.schedule.ops[size_t(st.args.rank.pp)];
  st.last_of_chunk.assign(st.train_ops.size(), false);
  const auto finishing = st.worker->split_backward() ? sched::OpKind::Weight : sched::OpKind::Backward;
  std::set<int32_t> chunk_seen;
  for (size_t i = st.train_ops.size(); i-- > 0;) {
    const auto& op = st.train_ops[i];
    if (op.kind == finishing && chunk_seen.insert(op.chunk).second) st.last_of_chunk[i] = true;
  }
  for (const auto& op : st.train_ops)
    if (op.kind == sched::OpKind::Forward && op.chunk == 0) st.last_train_forward = op.microbatch;
  return {
      [self](wire_atom, const Registry& registry) {
        auto& s = self->state;
        const auto& r = s.args.rank;
        const Peers peers(registry);
        s.coordinator = peers.coordinator();
        s.optimizer = peers.optimizer(r);
        s.loader = peers.loader(r.dp);
        // With model chunks (interleaved) the pipeline is a ring: the last stage's
        // chunk c feeds the first stage's chunk c + 1.
        const bool ring = s.worker->chunks() > 1;
        const int p = s.topo.pp;
        if (r.pp + 1 < p || ring)
          s.next = peers.stage({r.dp, (r.pp + 1) % p, r.tp});
        if (r.pp > 0 || ring)
          s.prev = peers.stage({r.dp, (r.pp + p - 1) % p, r.tp});
        s.transport->set_remote(in_other_process(s.prev, self->node()), in_other_process(s.next, self->node()));
        if (s.hosted) {
          const int32_t physical = s.topo.physical_replicas();
          const auto at = [&](int32_t dp) { return peers.stage({dp, r.pp, r.tp}); };
          if (s.round + 1 < s.rounds) s.next_round = at(r.dp + physical);
          s.first_round = at(r.dp % physical);
          s.earlier_rounds.clear();
          for (int32_t d = r.dp % physical; d < r.dp; d += physical) s.earlier_rounds.push_back(at(d));
        }
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
        s.transport->arrived_forward(a.kind, a.x);
        s.inputs[{a.kind, a.step, a.microbatch, a.chunk}] = a.x;
        advance(self);
      },
      [self](eval_consumed_atom, int64_t step, int32_t mb, int32_t chunk) {
        auto& s = self->state;
        if (s.eval_turn && s.eval_turn->step == step) {  // a finished pass whose turn waits
          ++s.eval_turn->consumed;
          return pass_eval_turn(self);
        }
        if (s.kind != StepKind::Eval || step != s.step) return;  // a pass already over
        s.eval_consumed.insert({mb, chunk});
        advance(self);
      },
      [self](msg::GradientsReady& g) {
        auto& s = self->state;
        s.transport->arrived_backward(g.dx);
        s.grads[{StepKind::Train, g.step, g.microbatch, g.chunk}] = g.dx;
        advance(self);
      },
      [self](const msg::ShardApplied& a) {
        auto& s = self->state;
        if (!s.waiting_for_update || a.step != s.step)
          throw std::logic_error(s.path + ": unexpected ShardApplied for step " + std::to_string(a.step));
        s.update_sums = a.sums;
        s.update_applied = a.applied;
        if (!s.worker->stages_collectives()) {
          s.worker->gather_parameters();
          return parameters_gathered(self);
        }
        if (!s.worker->issue_parameters_to_host()) return parameters_gathered(self);
        send_when_done(s.worker->device(), stage_actor{self}, params_on_host_atom::value, s.step);
      },
      [self](turn_atom, int64_t seq) {
        auto& s = self->state;
        s.turn_seq = std::max(s.turn_seq, seq);
        advance(self);
      },
      [self](reduced_atom, int64_t step) {
        check_landed(self->state, step, "the ordered reduction's sums");
        gradients_reduced(self, self->state.worker->shard_range());
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
