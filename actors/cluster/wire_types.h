// How the runtime's messages cross processes (cluster mode): an `inspect` overload
// (CAF 0.17 API) for every message type that can travel between the supervisor and
// a worker or between workers, and add_wire_types(), which registers all of them
// under one name each. Both sides call it, so the names agree.
//
// Payloads: float and integer vectors are written as raw bytes (apply_raw: one
// memcpy; CAF 0.17 would otherwise serialize each element on its own, an order of
// magnitude slower: docs/performance.md, "Numbers the code's comments rely on"). Both peers must have the same byte order (x86-64 and aarch64 do).
// A microbatch travels by value. Activations and their gradients carry only their
// shape when the payload went through the pipeline-neighbour communicator
// (Activations::via_comm); an in-process payload that is sent to another process
// anyway travels by value.
//
// GradShardReady, ShardApplied and ShardSnapshot stay in-process only (a rank's
// stage, optimizer shard and writer share a process): actors/message_types.h keeps
// them unsafe, so CAF refuses to serialize them.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include <caf/all.hpp>

#include "actors/cluster/wire_rank.h"
#include "data/batch.h"
#include "engine/state_snapshot.h"
#include "engine/topology.h"
#include "messages/runtime.h"
#include "model/param_registry.h"

namespace troupe::wire {

// A vector of trivially copyable elements written as its length and raw bytes.
template <class T>
struct Raw {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T>* v;
};
template <class T>
Raw<T> raw(std::vector<T>& v) {
  return {&v};
}

template <class Inspector>
constexpr bool is_binary() {
  return std::is_base_of_v<caf::serializer, Inspector> || std::is_base_of_v<caf::deserializer, Inspector>;
}

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, Raw<T>& x) {
  if constexpr (is_binary<Inspector>()) {
    uint64_t n = x.v->size();
    if (auto err = f(n)) return err;
    if constexpr (Inspector::writes_state) x.v->resize(size_t(n));
    if (n == 0) return caf::error{};
    return f.apply_raw(size_t(n) * sizeof(T), x.v->data());
  } else {
    return f(*x.v);
  }
}

// Every type that crosses processes, registered under its C++ name. Call on both sides
// before the actor_system is created.
void add_wire_types(caf::actor_system_config& cfg);

}  // namespace troupe::wire

namespace troupe::data {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Microbatch& x) {
  using wire::raw;
  return f(caf::meta::type_name("troupe::data::Microbatch"), x.batch, x.seq, raw(x.tokens), raw(x.targets),
           raw(x.positions), raw(x.segments), raw(x.loss_mask), raw(x.sample_ids), x.first_slot, x.loss_tokens,
           x.padding_tokens, x.global_loss_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BatchCounts& x) {
  return f(caf::meta::type_name("troupe::data::BatchCounts"), x.samples, x.input_tokens, x.loss_tokens,
           x.padding_tokens);
}

}  // namespace troupe::data

namespace troupe::model {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FlatRange& x) {
  return f(caf::meta::type_name("troupe::model::FlatRange"), x.begin, x.end);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ParamTensor& x) {
  auto group = uint8_t(x.group);
  auto init = uint8_t(x.init);
  return f(caf::meta::type_name("troupe::model::ParamTensor"), x.name, x.global_shape, x.slice_start, x.shape,
           x.offset, x.numel, group, x.counts_in_norm, x.replicated, init, x.init_std, x.valid_rows,
           caf::meta::load_callback([&]() -> caf::error {
             x.group = DecayGroup(group);
             x.init = InitKind(init);
             return caf::none;
           }));
}

}  // namespace troupe::model

namespace troupe::engine {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StageSnapshot& x) {
  return f(caf::meta::type_name("troupe::engine::StageSnapshot"), x.rank, x.tensors, wire::raw(x.params));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, OptimSnapshot& x) {
  return f(caf::meta::type_name("troupe::engine::OptimSnapshot"), x.rank, x.range, x.adam_steps,
           wire::raw(x.exp_avg), wire::raw(x.exp_avg_sq));
}

}  // namespace troupe::engine

namespace troupe::msg {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UpdateRule& x) {
  return f(caf::meta::type_name("troupe::msg::UpdateRule"), x.shard_decides, x.lr, x.clip_grad);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunStep& x) {
  auto kind = uint8_t(x.kind);
  return f(caf::meta::type_name("troupe::msg::RunStep"), x.step, kind, x.consumed_samples, x.microbatches,
           x.previous_done_may_wait, x.update, caf::meta::load_callback([&]() -> caf::error {
             x.kind = StepKind(kind);
             return caf::none;
           }));
}

// The batch travels by value: a receiver in another process gets its own copy.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MicrobatchReady& x) {
  auto kind = uint8_t(x.kind);
  if constexpr (Inspector::writes_state) {
    auto batch = std::make_shared<data::Microbatch>();
    auto err = f(caf::meta::type_name("troupe::msg::MicrobatchReady"), x.step, kind, x.microbatch, *batch);
    x.kind = StepKind(kind);
    x.batch = std::move(batch);
    return err;
  } else {
    data::Microbatch none;
    auto& batch = x.batch ? const_cast<data::Microbatch&>(*x.batch) : none;
    return f(caf::meta::type_name("troupe::msg::MicrobatchReady"), x.step, kind, x.microbatch, batch);
  }
}

// Shape only when the values went through a communicator (via_comm); otherwise the
// values themselves (an in-process handle cannot be dereferenced elsewhere).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Activations& x) {
  if constexpr (Inspector::writes_state) {
    bool by_value = false;
    std::vector<float> values;
    auto err = f(caf::meta::type_name("troupe::msg::Activations"), x.rows, x.cols, x.via_comm, by_value,
                 wire::raw(values));
    x.data = nullptr;
    x.owner.reset();
    if (by_value) {
      auto owned = std::make_shared<const std::vector<float>>(std::move(values));
      x.data = owned->data();
      x.owner = std::move(owned);
    }
    return err;
  } else {
    bool by_value = !x.via_comm && x.data != nullptr;
    std::vector<float> values;
    if (by_value) values.assign(x.data, x.data + x.rows * x.cols);
    return f(caf::meta::type_name("troupe::msg::Activations"), x.rows, x.cols, x.via_comm, by_value,
             wire::raw(values));
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActivationsReady& x) {
  auto kind = uint8_t(x.kind);
  return f(caf::meta::type_name("troupe::msg::ActivationsReady"), x.step, kind, x.microbatch, x.x, x.chunk,
           caf::meta::load_callback([&]() -> caf::error {
             x.kind = StepKind(kind);
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GradientsReady& x) {
  return f(caf::meta::type_name("troupe::msg::GradientsReady"), x.step, x.microbatch, x.dx, x.chunk);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SegmentLoss& x) {
  return f(caf::meta::type_name("troupe::msg::SegmentLoss"), x.row, x.segment, x.loss_sum, x.loss_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LossReport& x) {
  auto kind = uint8_t(x.kind);
  return f(caf::meta::type_name("troupe::msg::LossReport"), x.step, kind, x.dp, x.microbatch, x.loss_sum,
           x.loss_tokens, x.finite, x.segments, caf::meta::load_callback([&]() -> caf::error {
             x.kind = StepKind(kind);
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplicaCounts& x) {
  auto kind = uint8_t(x.kind);
  return f(caf::meta::type_name("troupe::msg::ReplicaCounts"), x.step, kind, x.dp, x.counts, wire::raw(x.sample_ids),
           caf::meta::load_callback([&]() -> caf::error {
             x.kind = StepKind(kind);
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NormPartial& x) {
  return f(caf::meta::type_name("troupe::msg::NormPartial"), x.step, x.rank, x.sum_squares, x.layers,
           x.layer_sum_squares);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UpdateCommand& x) {
  return f(caf::meta::type_name("troupe::msg::UpdateCommand"), x.step, x.lr, x.clip_factor, x.skip, x.mirror);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StageTiming& x) {
  // [start, end) pairs as one flat vector: 2 doubles per op.
  std::vector<double> busy;
  if constexpr (!Inspector::writes_state)
    for (const auto& [a, b] : x.busy) busy.insert(busy.end(), {a, b});
  return f(caf::meta::type_name("troupe::msg::StageTiming"), wire::raw(busy), wire::raw(x.op_kinds),
           wire::raw(x.waits), x.compute_s, x.wait_s, x.sync_s, x.end_time, x.memory.weights, x.memory.gradients,
           x.memory.optimizer_state, x.memory.activations, x.memory.scratch, x.memory.planned_activations,
           caf::meta::load_callback([&]() -> caf::error {
             x.busy.clear();
             for (size_t i = 0; i + 1 < busy.size(); i += 2) x.busy.emplace_back(busy[i], busy[i + 1]);
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UpdateSums& x) {
  return f(caf::meta::type_name("troupe::msg::UpdateSums"), x.update_sum_squares, x.weight_sum_squares);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StageDone& x) {
  auto kind = uint8_t(x.kind);
  return f(caf::meta::type_name("troupe::msg::StageDone"), x.step, kind, x.rank, x.timing, x.update,
           x.applied, caf::meta::load_callback([&]() -> caf::error {
             x.kind = StepKind(kind);
             return caf::none;
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Heartbeat& x) {
  return f(caf::meta::type_name("troupe::msg::Heartbeat"), x.path, x.step);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotCommand& x) {
  return f(caf::meta::type_name("troupe::msg::SnapshotCommand"), x.step, x.partial_dir, x.partial_dir_inode,
           x.partial_dir_generation, x.attempt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotTaken& x) {
  return f(caf::meta::type_name("troupe::msg::SnapshotTaken"), x.step, x.rank);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardWritten& x) {
  return f(caf::meta::type_name("troupe::msg::ShardWritten"), x.step, x.rank, x.ok, x.error, x.record,
           x.seconds, x.bytes, x.attempt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorKept& x) {
  return f(caf::meta::type_name("troupe::msg::MirrorKept"), x.step, x.timeline, x.rank, x.record, x.holders);
}

}  // namespace troupe::msg
