#include "actors/optimizer_actor.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/peers.h"
#include "actors/send_when_done.h"
#include "comm/communicator.h"
#include "engine/checkpointing.h"
#include "engine/hosted_stage.h"
#include "engine/optimizer_shard.h"
#include "engine/stage_worker.h"
#include "engine/rank_device.h"
#include "optim/grad_clip.h"

namespace troupe::actors {
namespace {

struct OptimizerState {
  OptimizerArgs args;
  std::string path;
  std::shared_ptr<kernels::Device> device;  // usually shared with the stage (engine/rank_device.h)
  std::unique_ptr<engine::OptimizerShard> shard;
  coordinator_actor coordinator;
  stage_actor stage;
  std::optional<msg::GradShardReady> pending;  // this step's buffers, until the update
  float* stage_params = nullptr;               // the stage's flat parameters (for snapshots)
  // The step whose state the shard holds: its last update applied (or dropped), the
  // checkpoint's step at a resume. A snapshot of step n is taken of exactly that state.
  int64_t state_step = 0;
  std::shared_ptr<const void> stage_owner;     // keeps stage_params alive (GradShardReady::owner)
  // The last snapshot's host copies (weights, m, v; n floats each, from the device's
  // allocate_host), reused once the writer has let go of them: fresh 4 KiB pages cost a
  // page fault each, which doubled the copy's time (and page-locking them costs more).
  std::shared_ptr<float> snapshot[3];
  // Snapshots whose copies are on their way to the host, oldest first: each goes to the
  // writer when its snapshot_landed_atom arrives.
  std::deque<msg::ShardSnapshot> landing;
  // The state mirror's copies of the last mirrored step (reused as `snapshot` is), and
  // the mirrored steps whose copies are on their way to the host, oldest first.
  std::shared_ptr<float> mirror_copy[3];
  std::deque<msg::MirrorSnapshot> mirror_landing;
};

using Self = optimizer_actor::stateful_base<OptimizerState>;

// The shared device's turn while this shard computes on it, when its rank is hosted
// (OptimizerArgs::hosted); nothing to hold otherwise.
std::unique_lock<std::mutex> device_turn(OptimizerState& s) {
  if (!s.args.hosted) return {};
  return std::unique_lock(s.args.hosted->device_turn);
}

void maybe_fault(Self* self, int64_t step, Fault::Phase phase) {
  engine::check_fault(self->state.args.faults.get(), self->state.path, step, phase);
}

// A writer restarted alone is out of the directory between its death and its
// successor's start (a few ms; longer on a loaded machine or a remote worker): a
// snapshot meanwhile waits for it, looking every kWriterPoll, for at most the step
// watchdog (a writer not back by then is lost: the checkpoint fails and the next one
// retries).
constexpr auto kWriterPoll = std::chrono::milliseconds(5);

// Hands `snap` to this rank's writer, or looks again after kWriterPoll; `waited_ms`
// is the time spent so far.
void deliver_snapshot(Self* self, msg::ShardSnapshot snap, int64_t waited_ms) {
  const std::chrono::milliseconds waited(waited_ms);
  auto& st = self->state;
  const auto path = engine::writer_path(st.args.rank);
  const std::chrono::duration<double> limit(st.args.config->step_watchdog_s);
  if (auto writer = st.args.directory ? st.args.directory->get(path) : caf::actor{}) {
    if (waited_ms > 0)
      spdlog::info("{}: checkpoint of step {}: {} is back after {} ms", st.path, snap.step, path, waited_ms);
    self->send(typed_handle<writer_actor>(writer), std::move(snap));
  } else if (st.args.directory && waited < limit) {
    self->delayed_send(self, kWriterPoll, deliver_atom::value, std::move(snap), (waited + kWriterPoll).count());
  } else {
    const auto& r = st.args.rank;
    self->send(st.coordinator,
               msg::ShardWritten{snap.step, r, false,
                                 fmt::format("{} is not running (waited {:.2f} s for its restart)", path,
                                             std::chrono::duration<double>(waited).count()),
                                 {}, 0, 0, snap.attempt});
  }
}

// The oldest copy on its way to the host, which is step `step`'s (copies land in the
// order they were issued); `what` names them in the error when it is not.
template <class Snapshot>
Snapshot take_landed(std::deque<Snapshot>& landing, int64_t step, const std::string& what) {
  if (landing.empty() || landing.front().step != step)
    throw std::logic_error(what + " of step " + std::to_string(step) + " landed, but no such copy is on its way");
  auto snap = std::move(landing.front());
  landing.pop_front();
  return snap;
}

// The host copies of the shard's state for a snapshot (weights, m, v), issued on the
// device after everything before: `copies` are reused when nothing else holds them.
void copy_state(OptimizerState& st, std::shared_ptr<float> (&copies)[3]) {
  const auto range = st.shard->range();
  const auto n = size_t(range.end - range.begin);
  const auto& a = st.shard->adamw();
  const float* sources[3] = {st.stage_params + range.begin, a.m(), a.v()};  // device memory
  for (int i = 0; i < 3; ++i) {
    auto& copy = copies[i];
    // use_count 1: neither the writer nor a landing snapshot holds it any more. (n is
    // the same every time: a shard's range never changes.)
    if (!copy || copy.use_count() != 1) {
      auto block = st.device->allocate_host(std::max<size_t>(1, n) * sizeof(float));
      copy = {block, static_cast<float*>(block.get())};
    }
    st.device->copy_to_host_async(copy.get(), sources[i], n * sizeof(float));
  }
}

// The state mirror: the shard's state after step `step`'s update, for the process's
// mirror keeper once the copies have landed, when the coordinator asked for this step
// (`asked`; a shard deciding its own update, the run's only one, asks itself whenever
// its previous copy is through).
void mirror_state(Self* self, int64_t step, bool asked) {
  auto& st = self->state;
  if (!asked || !st.args.mirror_timeline || !engine::writes_shard(st.args.config->distributed, st.args.rank)) return;
  copy_state(st, st.mirror_copy);
  const auto range = st.shard->range();
  st.mirror_landing.push_back(msg::MirrorSnapshot{step, *st.args.mirror_timeline, st.args.rank, range.begin,
                                                  range.end, st.mirror_copy[0], st.mirror_copy[1], st.mirror_copy[2]});
  send_when_done(*st.device, optimizer_actor{self}, mirror_landed_atom::value, step);
}

// Copies the shard's state for the checkpoint of `step` and hands it to its writer once
// the copies have landed (on a GPU from the device's completion callback: this thread
// does not wait). Training may go on at once: the copies are issued on the device before
// anything that follows, so they read the state of this step boundary.
void take_snapshot(Self* self, const msg::SnapshotCommand& cmd) {
  auto& st = self->state;
  const auto& r = st.args.rank;
  if (engine::writes_shard(st.args.config->distributed, r)) {
    if (!st.stage_params)
      throw std::logic_error(st.path + ": snapshot requested before any step ran");
    if (st.state_step != cmd.step)
      throw std::logic_error(st.path + ": snapshot of step " + std::to_string(cmd.step) +
                             " requested, but the shard's state is that of step " + std::to_string(st.state_step));
    const auto range = st.shard->range();
    copy_state(st, st.snapshot);
    st.landing.push_back(msg::ShardSnapshot{cmd.step, cmd.partial_dir, cmd.partial_dir_inode,
                                            cmd.partial_dir_generation, cmd.attempt, r, range.begin,
                                            range.end, st.snapshot[0], st.snapshot[1], st.snapshot[2]});
    send_when_done(*st.device, optimizer_actor{self}, snapshot_landed_atom::value, cmd.step);
  }
  self->send(st.coordinator, msg::SnapshotTaken{cmd.step, r});
}

// Applies step u.step's update to the gradients the stage handed over (or drops it:
// u.skip) and tells the stage once it is done on the device.
void apply_update(Self* self, const msg::UpdateCommand& u) {
  auto& s = self->state;
  if (!s.pending || s.pending->step != u.step)
    throw std::logic_error(s.path + ": update for step " + std::to_string(u.step) + " without its gradients");
  maybe_fault(self, u.step, Fault::OPTIMIZER);
  if (!u.skip) {
    const auto turn = device_turn(s);
    s.shard->apply(s.pending->params, s.pending->grads, u.lr, u.clip_factor);
  }
  s.pending.reset();
  s.state_step = u.step;
  mirror_state(self, u.step, u.mirror);
  // Once the update is done on the device (the stage gets nothing else from here),
  // with its sums for the update-to-weight ratio (0 for a dropped update).
  s.device->when_done([to = s.stage, sums = s.shard->update_readback(), u] {
    msg::ShardApplied applied{u.step, {}, u};
    if (!u.skip) applied.sums = {sums.update_total(), sums.weight_total()};
    caf::anon_send(to, applied);
  });
}

optimizer_actor::behavior_type optimizer_impl(Self* self, OptimizerArgs args) {
  auto& st = self->state;
  st.path = engine::optim_path(args.rank);
  st.args = std::move(args);
  exit_on_exception(self, st.path);
  const OptimizerConfig& c = *st.args.config;
  const auto& r = st.args.rank;
  if (!st.args.device || !st.args.registry) throw std::logic_error(st.path + ": spawned without a device or a registry");
  st.device = st.args.device;
  const model::ParameterRegistry& registry = *st.args.registry;
  // The flat range this rank owns; must match engine::StageWorker::shard_range.
  model::FlatRange range{0, registry.total()};
  if (c.distributed) {
    const auto chunk = comm::chunk_range(size_t(registry.total()), c.data_parallel, r.dp);
    range = {int64_t(chunk.begin), int64_t(chunk.end)};
  }
  st.shard = std::make_unique<engine::OptimizerShard>(c.adamw, *st.device, registry, range,
                                                      /*counts_in_norm=*/c.distributed || r.dp == 0);
  if (st.args.resume) {
    engine::restore_shard(*st.args.resume, registry, *st.shard);
    st.state_step = st.args.resume->step();
  }
  return {
      [self](wire_atom, const Registry& registry) {
        const Peers peers(registry);
        self->state.coordinator = peers.coordinator();
        self->state.stage = peers.stage(self->state.args.rank);
        return wired_atom::value;
      },
      [self](const msg::GradShardReady& g) {
        auto& s = self->state;
        const auto range = s.shard->range();
        if (g.shard_begin != range.begin || g.shard_end != range.end)
          throw std::logic_error(s.path + ": stage handed shard [" + std::to_string(g.shard_begin) + ", " +
                                 std::to_string(g.shard_end) + ") but this shard owns [" +
                                 std::to_string(range.begin) + ", " + std::to_string(range.end) + ")");
        maybe_fault(self, g.step, Fault::REDUCE);
        if (g.update.shard_decides && !s.shard->counts_in_norm())
          throw std::logic_error(s.path + ": asked to decide step " + std::to_string(g.step) +
                                 "'s update, but its partial is not counted in the global norm");
        s.pending = g;
        s.stage_params = g.params;
        s.stage_owner = g.owner;
        // The partial reaches the coordinator once the device has summed it (on a GPU
        // from its completion callback): this thread does not wait for the device.
        {
          const auto turn = device_turn(s);
          s.shard->issue_norm_partial(g.grads);
        }
        const auto& rk = s.args.rank;
        // When it decides the update itself, the partial also comes back to it, after the
        // coordinator's copy (whose decision then runs beside the update).
        const auto me = g.update.shard_decides ? optimizer_actor{self} : optimizer_actor{};
        s.device->when_done([to = s.coordinator, me, sums = s.shard->norm_readback(), layer_sums = s.shard->layer_readback(),
                             layers = s.shard->norm_part_layers(),
                             partial = msg::NormPartial{g.step, rk, 0.0, {}, {}}]() mutable {
          partial.sum_squares = sums.total();
          const double sum_squares = partial.sum_squares;
          const int64_t step = partial.step;
          // By layer, for the spike record: consecutive parts of one layer added in order.
          for (size_t i = 0; i < layer_sums.count; ++i) {
            if (partial.layers.empty() || partial.layers.back() != layers[i]) {
              partial.layers.push_back(layers[i]);
              partial.layer_sum_squares.push_back(0.0);
            }
            partial.layer_sum_squares.back() += layer_sums.parts.get()[i];
          }
          caf::anon_send(to, std::move(partial));
          if (me) caf::anon_send(me, norm_summed_atom::value, step, sum_squares);
        });
      },
      [self](const msg::UpdateCommand& u) {
        auto& s = self->state;
        if (s.pending && s.pending->update.shard_decides)
          throw std::logic_error(s.path + ": an UpdateCommand for step " + std::to_string(u.step) +
                                 ", whose update this shard decides itself");
        apply_update(self, u);
      },
      [self](norm_summed_atom, int64_t step, double sum_squares) {
        // The one shard of the run decides from its own partial, which is the global
        // sum of squares (the coordinator's ledger sums the same single partial from 0).
        auto& s = self->state;
        if (!s.pending || s.pending->step != step)
          throw std::logic_error(s.path + ": its norm partial of step " + std::to_string(step) +
                                 " came back without the step's gradients");
        const auto rule = s.pending->update;
        const auto d = optim::decide(sum_squares, rule.clip_grad);
        // Its own mirror: when the previous copy is through (nothing else asks it).
        bool mirror_free = s.mirror_landing.empty();
        for (const auto& copy : s.mirror_copy) mirror_free = mirror_free && (!copy || copy.use_count() == 1);
        apply_update(self, msg::UpdateCommand{step, rule.lr, d.factor, d.skip, mirror_free});
      },
      [self](const msg::SnapshotCommand& cmd) { take_snapshot(self, cmd); },
      [self](snapshot_landed_atom, int64_t step) {
        auto& s = self->state;
        deliver_snapshot(self, take_landed(s.landing, step, s.path + ": the host copies of a save's snapshot"), 0);
      },
      [self](deliver_atom, msg::ShardSnapshot& snap, int64_t waited_ms) {
        deliver_snapshot(self, std::move(snap), waited_ms);
      },
      [self](mirror_landed_atom, int64_t step) {
        auto& s = self->state;
        auto snap = take_landed(s.mirror_landing, step, s.path + ": the state mirror's copies");
        const auto keeper = s.args.directory ? s.args.directory->get(engine::mirror_keeper_path()) : caf::actor{};
        if (!keeper) return;  // being restarted: this step is not mirrored (the coordinator asks again later)
        self->send(typed_handle<mirror_keeper_actor>(keeper), std::move(snap));
      },
      [self](snapshot_atom) {
        auto& s = self->state;
        const auto& a = s.shard->adamw();
        const auto n = size_t(a.range().end - a.range().begin);
        return engine::OptimSnapshot{s.args.rank, a.range(), a.steps(), kernels::download(*s.device, a.m(), n),
                                     kernels::download(*s.device, a.v(), n)};
      },
  };
}

}  // namespace

std::shared_ptr<const OptimizerConfig> OptimizerConfig::of(const Config& c) {
  return std::make_shared<const OptimizerConfig>(OptimizerConfig{optim::AdamWHyper::from_config(c),
                                                                 c.parallel().distributed_optimizer(),
                                                                 c.parallel().data(),
                                                                 c.supervision().step_watchdog_s()});
}

optimizer_actor spawn_optimizer(caf::event_based_actor* parent, OptimizerArgs args) {
  return parent->spawn<caf::detached>(optimizer_impl, std::move(args));
}

}  // namespace troupe::actors
