#include "actors/loader_actor.h"

#include <memory>
#include <optional>

#include "actors/message_types.h"
#include "actors/peers.h"
#include "data/batch_source.h"
#include "engine/topology.h"

namespace troupe::actors {
namespace {

struct LoaderState {
  LoaderArgs args;
  std::optional<data::BatchSource> train, valid;
  std::vector<stage_actor> stages;  // every stage of this replica
  coordinator_actor coordinator;
  int32_t microbatches = 0;  // per step
  int64_t global_batch = 0;
  int32_t prefetch = 1;
  // The stream: the next (step, microbatch) to produce, and the run's last step.
  int64_t next_step = 0, last_step = 0, consumed_at_first = 0, first_step = 0;
  int32_t next_mb = 0;
  int64_t in_flight = 0;  // produced and not yet credited back
  msg::ReplicaCounts counts;
};

using Self = loader_actor::stateful_base<LoaderState>;

void send_to_stages(Self* self, const msg::MicrobatchReady& m) {
  for (const auto& s : self->state.stages) self->send(s, m);
}

void add_counts(msg::ReplicaCounts& c, const data::Microbatch& mb) {
  c.counts.samples += mb.batch;
  c.counts.input_tokens += int64_t(mb.batch) * mb.seq;
  c.counts.loss_tokens += mb.loss_tokens;
  c.counts.padding_tokens += mb.padding_tokens;
  c.sample_ids.insert(c.sample_ids.end(), mb.sample_ids.begin(), mb.sample_ids.end());
}

// Produces training microbatches while credit lasts.
void pump(Self* self) {
  auto& st = self->state;
  while (st.in_flight < st.prefetch && st.next_step <= st.last_step) {
    const int64_t consumed = st.consumed_at_first + (st.next_step - st.first_step) * st.global_batch;
    const auto path = engine::loader_path(st.args.dp);
    if (st.next_mb == 0) engine::check_fault(st.args.faults.get(), path, st.next_step, Fault::FORWARD);
    if (st.next_mb == st.microbatches - 1)
      engine::check_fault(st.args.faults.get(), path, st.next_step, Fault::BACKWARD);
    auto mb = std::make_shared<const data::Microbatch>(st.train->microbatch(consumed, st.args.dp, st.next_mb));
    if (st.next_mb == 0) st.counts = msg::ReplicaCounts{st.next_step, msg::StepKind::Train, st.args.dp, {}, {}};
    add_counts(st.counts, *mb);
    send_to_stages(self, msg::MicrobatchReady{st.next_step, msg::StepKind::Train, st.next_mb, std::move(mb)});
    ++st.in_flight;
    if (++st.next_mb == st.microbatches) {
      self->send(st.coordinator, std::move(st.counts));
      st.next_mb = 0;
      ++st.next_step;
    }
  }
}

// The validation set: positions [0, samples) of the validation order; replica dp
// reads its contiguous block, in microbatches of micro_batch_size rows.
void produce_eval(Self* self, const msg::RunStep& rs) {
  auto& st = self->state;
  const data::InputSpec& in = st.args.config->input;
  const int32_t mbs = in.batch.micro_batch_size();
  const int64_t per_replica = int64_t(rs.microbatches) * mbs;
  const int64_t total = per_replica * in.data_parallel;
  std::vector<int64_t> ids(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) ids[size_t(i)] = st.valid->sample_at(i);
  // The loss of the pass is normalised by the whole validation set's tokens.
  const int64_t set_tokens = st.valid->samples(ids).loss_tokens;
  msg::ReplicaCounts counts{rs.step, msg::StepKind::Eval, st.args.dp, {}, {}};
  for (int32_t j = 0; j < rs.microbatches; ++j) {
    const auto first = ids.begin() + st.args.dp * per_replica + int64_t(j) * mbs;
    auto mb = st.valid->samples(std::vector<int64_t>(first, first + mbs));
    mb.global_loss_tokens = set_tokens;
    add_counts(counts, mb);
    send_to_stages(self, msg::MicrobatchReady{rs.step, msg::StepKind::Eval, j,
                                              std::make_shared<const data::Microbatch>(std::move(mb))});
  }
  self->send(st.coordinator, std::move(counts));
}

loader_actor::behavior_type loader_impl(Self* self, LoaderArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, engine::loader_path(st.args.dp));
  const LoaderConfig& c = *st.args.config;
  st.train = data::BatchSource::open(c.input, data::Split::Train, st.args.skip_samples);
  // The validation split skips nothing: the skip list is the train split's.
  if (c.evaluates) st.valid = data::BatchSource::open(c.input, data::Split::Valid, {});
  st.microbatches = int32_t(c.input.microbatches_per_replica());
  st.global_batch = c.input.batch.global_batch_size();
  st.prefetch = std::max(1, c.input.data.prefetch_microbatches());
  return {
      [self](wire_atom, const Registry& registry) {
        auto& s = self->state;
        const Peers peers(registry);
        const auto& t = s.args.config->layout;
        s.coordinator = peers.coordinator();
        s.stages.clear();
        for (int32_t p = 0; p < t.pp; ++p)
          for (int32_t k = 0; k < t.tp; ++k) s.stages.push_back(peers.stage({s.args.dp, p, k}));
        return wired_atom::value;
      },
      [self](start_atom, int64_t first_step, int64_t consumed, int64_t last_step) {
        auto& s = self->state;
        s.first_step = s.next_step = first_step;
        s.consumed_at_first = consumed;
        s.last_step = last_step;
        s.next_mb = 0;
        s.in_flight = 0;
        pump(self);
      },
      [self](credit_atom, int64_t, int32_t) {
        // A credit for a microbatch a predecessor produced finds nothing in flight.
        self->state.in_flight = std::max<int64_t>(0, self->state.in_flight - 1);
        pump(self);
      },
      [self](const msg::RunStep& rs) {
        if (rs.kind == msg::StepKind::Eval) produce_eval(self, rs);
      },
  };
}

}  // namespace

std::shared_ptr<const LoaderConfig> LoaderConfig::of(const Config& c) {
  return std::make_shared<const LoaderConfig>(
      LoaderConfig{data::InputSpec::of(c), c.training().eval_samples() > 0, engine::Topology::logical(c)});
}

loader_actor spawn_loader(caf::event_based_actor* parent, LoaderArgs args) {
  return parent->spawn(loader_impl, std::move(args));
}

}  // namespace troupe::actors
