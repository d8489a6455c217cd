#include "engine/stage_worker.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <chrono>
#include <thread>

#include "config/derived.h"
#include "comm/ordered_reduction.h"
#include "engine/document_losses.h"
#include "engine/hosted_stage.h"
#include "engine/rank_device.h"
#include "sched/activation_memory.h"
#include "sched/pipeline_schedule.h"

namespace troupe::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int activation_slots(ParallelConfig::Schedule schedule, int pipeline, int pp, int microbatches) {
  const auto ops = sched::build_pipeline_schedule(schedule, pipeline, microbatches);
  return sched::activation_slots(schedule, sched::peak_in_flight(ops.ops[size_t(pp)]), microbatches);
}

model::StageLayers stage_layers(const Config& c, const Rank& r) { return model::StageLayers::pipeline(c, r.pp); }

model::TensorSlice tensor_slice(const Config& c, const Rank& r) { return {r.tp, c.parallel().tensor()}; }

model::ParameterRegistry stage_registry(const Config& c, const Rank& r) {
  return model::ParameterRegistry(c, stage_layers(c, r), tensor_slice(c, r));
}

StageSpec StageSpec::of(const Config& c, const Rank& r, std::shared_ptr<const sched::PipelineSchedule> schedule) {
  // The slots are counted on the schedule as built: the verified lists are the same
  // ones (a mutation under test is refused before any stage starts).
  return {r,
          model::ModelSpec(c),
          stage_layers(c, r),
          model::StageShape::from_config(c),
          sched::stage_activations(c, r.pp, sched::build_pipeline_schedule(c)),
          Topology::logical(c),
          c.parallel().distributed_optimizer(),
          c.parallel().sequence_parallel(),
          c.supervision().heartbeat_interval_s(),
          c.training().init_from(),
          std::move(schedule)};
}

StageWorker::StageWorker(const Config& c, Rank rank, RankComms comms, std::shared_ptr<kernels::Device> device)
    : StageWorker(StageSpec::of(c, rank, nullptr), std::move(comms),
                  device ? std::move(device) : make_rank_device(c, Topology::logical(c), rank)) {}

StageWorker::StageWorker(const StageSpec& spec, RankComms comms, std::shared_ptr<kernels::Device> device)
    : rank_(spec.rank),
      comms_(std::move(comms)),
      distributed_(spec.distributed_optimizer),
      width_(spec.model.model.width()),
      device_(std::move(device)) {
  if (!device_) throw std::invalid_argument("stage " + rank_text(rank_) + ": no device");
  const Topology& topo = spec.layout;
  model::TensorParallel tp;
  if (topo.tp > 1) {
    if (!comms_.tensor_parallel || comms_.tensor_parallel->size() != topo.tp ||
        comms_.tensor_parallel->rank() != rank_.tp)
      throw std::invalid_argument("stage tp" + std::to_string(rank_.tp) + ": the tensor-parallel communicator is not "
                                  "rank " + std::to_string(rank_.tp) + " of parallel.tensor = " +
                                  std::to_string(topo.tp));
    tp.group = comms_.tensor_parallel;
    tp.sequence_parallel = spec.sequence_parallel;
  }
  // This stage's slots per chunk, as the planner's ledger counts them (only this stage:
  // under interleaving each stage's count is a happens-before analysis of the op lists).
  const auto& plan = spec.activations;
  const auto make = [&] {
    return std::make_unique<model::GptStage>(spec.model, spec.layers, *device_,
                                             std::vector<int>(plan.chunk_slots.begin(), plan.chunk_slots.end()),
                                             spec.shape, std::move(tp));
  };
  if (hosted())
    model_ = shared_model(comms_, device_, make, made_model_);
  else
    model_ = make();
  planned_activations_ = plan.saved_bytes();
  const size_t n = size_t(model_->param_count());
  if (hosted()) {
    // Logical replica d owns chunk d of the logical layout's, whatever hosts it.
    const auto chunk = comm::chunk_range(n, topo.dp, rank_.dp);
    shard_ = {int64_t(chunk.begin), int64_t(chunk.end)};
  } else if (distributed_) {
    const auto chunk = comm::chunk_range(n, comms_.data_parallel->size(), comms_.data_parallel->rank());
    shard_ = {int64_t(chunk.begin), int64_t(chunk.end)};
  } else {
    shard_ = {0, int64_t(n)};
  }
}

void StageWorker::begin_round(bool first) {
  if (first) device_->memory().reset_peak();
  model_->zero_grads();
  model_->reset_tp_comm_seconds();
  buckets_.clear();
}

void StageWorker::contribute_gradients() {
  const auto t0 = std::chrono::steady_clock::now();
  model_->reduce_tensor_parallel_grads();
  if (comm::Communicator* tied = tied_embedding_group()) {
    const auto& wte = model_->registry().at(model_->registry().embedding_name());
    tied->all_reduce_sum({model_->grads() + wte.offset, size_t(wte.numel)});
  }
  comms_.ordered_reduction->contribute(rank_.dp, model_->grads());
  sync_s_ = seconds_since(t0);
}

void StageWorker::finish_reduction() {
  const auto t0 = std::chrono::steady_clock::now();
  comms_.ordered_reduction->finish(model_->grads());
  sync_s_ += seconds_since(t0);
}

void StageWorker::begin_step() {
  device_->memory().reset_peak();
  model_->zero_grads();
  model_->reset_tp_comm_seconds();
  buckets_.clear();
}

msg::StageMemory StageWorker::memory_peak() {
  const kernels::MemorySplit peak = device_->memory().peak();
  msg::StageMemory m;
  m.weights = peak.weights;
  m.gradients = peak.gradients;
  m.optimizer_state = peak.optimizer_state;
  m.activations = peak.activations;
  m.scratch = peak.scratch;
  m.planned_activations = planned_activations_;
  return m;
}

bool StageWorker::overlaps_reduction() const {
  if (hosted()) return false;
  const auto& dp = *comms_.data_parallel;
  return dp.on_device() && distributed_ && dp.size() > 1 && model_->tensor_parallel().size() == 1;
}

double LossReadback::sum(int mb, int64_t rows) const {
  return model::sum_token_losses(host.get() + int64_t(mb) * stride, rows);
}

std::vector<msg::SegmentLoss> LossReadback::segments(int mb, const data::Microbatch& batch) const {
  return segment_losses(host.get() + int64_t(mb) * stride, batch);
}

void StageWorker::reserve_losses(int microbatches) {
  if (!is_last() || microbatches <= loss_capacity_) return;
  loss_stride_ = int64_t(model_->shape().micro_batch) * model_->shape().seq;
  auto block = device_->allocate_host(size_t(microbatches) * size_t(loss_stride_) * sizeof(float));
  loss_host_ = {block, static_cast<float*>(block.get())};
  loss_capacity_ = microbatches;
}

int64_t StageWorker::forward(int mb, const data::Microbatch& batch, const float* input, int chunk) {
  const int64_t loss_tokens = model_->issue_forward(slot(mb, chunk), batch, input);
  if (chunk_is_last(chunk)) {
    if (mb < 0 || mb >= loss_capacity_)
      throw std::logic_error("StageWorker::forward: microbatch " + std::to_string(mb) + " outside the " +
                             std::to_string(loss_capacity_) + " reserved for losses (reserve_losses)");
    device_->copy_to_host_async(loss_host_.get() + int64_t(mb) * loss_stride_,
                                model_->token_losses(slot(mb, chunk)),
                                size_t(batch.batch) * size_t(batch.seq) * sizeof(float));
  }
  return loss_tokens;
}

std::function<void(model::FlatRange)> StageWorker::reduce_each_block() {
  return [this](model::FlatRange block) {
    const std::span<float> all(model_->grads(), size_t(model_->param_count()));
    comms_.data_parallel->issue_reduce_scatter_sum_part(all, size_t(block.begin), size_t(block.end));
    buckets_.push_back(block);
  };
}

void StageWorker::backward(int mb, const float* grad_output, bool last_of_chunk, int chunk) {
  if (!last_of_chunk || !overlaps_reduction()) return model_->backward(slot(mb, chunk), grad_output);
  model_->backward(slot(mb, chunk), grad_output, reduce_each_block());
}

void StageWorker::backward_input(int mb, const float* grad_output) { model_->backward_input(slot(mb), grad_output); }

void StageWorker::backward_weight(int mb, bool last_of_step) {
  if (!last_of_step || !overlaps_reduction()) return model_->backward_weight(slot(mb));
  model_->backward_weight(slot(mb), reduce_each_block());
}

const float* StageWorker::output(int mb, int chunk) const { return model_->output(slot(mb, chunk)); }
const float* StageWorker::input_grad(int mb, int chunk) const { return model_->input_grad(slot(mb, chunk)); }

float* StageWorker::inbox(Inbox side, int64_t n) {
  kernels::Buffer& b = inboxes_[int(side)];
  if (b.count() < n) b = device_->allocate(n);
  return b.f32();
}

comm::Communicator* StageWorker::tied_embedding_group() const {
  return model_->registry().tied() ? comms_.embedding.get() : nullptr;
}

model::FlatRange StageWorker::gradient_collective_range() const {
  if (comms_.data_parallel->size() > 1) return {0, model_->param_count()};
  if (!tied_embedding_group()) return {0, 0};
  const auto& wte = model_->registry().at(model_->registry().embedding_name());
  return {wte.offset, wte.offset + wte.numel};
}

model::FlatRange StageWorker::parameter_collective_range() const {
  if (!distributed_ || comms_.data_parallel->size() == 1) return {0, 0};
  return {0, model_->param_count()};
}

// The issue forms: a device communicator enqueues and returns, any other one blocks
// until the collective is done (comm/communicator.h).
void StageWorker::reduce_gradients_at(float* grads) {
  if (comm::Communicator* tied = tied_embedding_group()) {
    const auto& wte = model_->registry().at(model_->registry().embedding_name());
    tied->issue_all_reduce_sum({grads + wte.offset, size_t(wte.numel)});
  }
  auto& dp = *comms_.data_parallel;
  if (dp.size() == 1) return;
  const std::span<float> all(grads, size_t(model_->param_count()));
  if (!buckets_.empty()) {
    // The parts the buckets left (embeddings, final LayerNorm, the tied head's wte),
    // then the device waits for every part before the update reads them.
    int64_t next = 0;
    for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {  // ascending order
      if (next < it->begin) dp.issue_reduce_scatter_sum_part(all, size_t(next), size_t(it->begin));
      next = it->end;
    }
    if (next < model_->param_count()) dp.issue_reduce_scatter_sum_part(all, size_t(next), all.size());
    dp.device_waits_for_issued();
  } else if (distributed_) {
    dp.issue_reduce_scatter_sum(all, all.subspan(size_t(shard_.begin), size_t(shard_.end - shard_.begin)));
  } else {
    dp.issue_all_reduce_sum(all);
  }
}

void StageWorker::gather_parameters_at(float* params) {
  const std::span<float> all(params, size_t(model_->param_count()));
  comms_.data_parallel->issue_all_gather(all.subspan(size_t(shard_.begin), size_t(shard_.end - shard_.begin)), all);
}

bool StageWorker::issue_to_host(const float* device_buffer, model::FlatRange range) {
  if (range.begin == range.end) return false;
  if (!staging_) {
    auto block = device_->allocate_host(size_t(model_->param_count()) * sizeof(float));
    staging_ = {block, static_cast<float*>(block.get())};
  }
  device_->copy_to_host_async(staging_.get() + range.begin, device_buffer + range.begin,
                              size_t(range.end - range.begin) * sizeof(float));
  return true;
}

bool StageWorker::issue_gradients_to_host() {
  sync_s_ = 0;
  model_->reduce_tensor_parallel_grads();
  return issue_to_host(model_->grads(), gradient_collective_range());
}

double StageWorker::collective_on_host(void (StageWorker::*collective)(float*), float* device_buffer,
                                       model::FlatRange range) {
  if (range.begin == range.end) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  (this->*collective)(staging_.get());
  device_->copy_from_host_async(device_buffer + range.begin, staging_.get() + range.begin,
                                size_t(range.end - range.begin) * sizeof(float));
  return seconds_since(t0);
}

model::FlatRange StageWorker::reduce_gradients_on_host() {
  sync_s_ = collective_on_host(&StageWorker::reduce_gradients_at, model_->grads(), gradient_collective_range());
  return shard_;
}

bool StageWorker::issue_parameters_to_host() { return issue_to_host(model_->params(), parameter_collective_range()); }

void StageWorker::gather_parameters_on_host() {
  sync_s_ += collective_on_host(&StageWorker::gather_parameters_at, model_->params(), parameter_collective_range());
}

model::FlatRange StageWorker::reduce_gradients() {
  if (hosted())
    throw std::logic_error("StageWorker::reduce_gradients: a hosted replica's gradients go through "
                           "contribute_gradients and finish_reduction");
  if (stages_collectives())
    throw std::logic_error("StageWorker::reduce_gradients: collectives staged through the host run in two parts "
                           "(issue_gradients_to_host, reduce_gradients_on_host)");
  const auto t0 = std::chrono::steady_clock::now();
  model_->reduce_tensor_parallel_grads();
  reduce_gradients_at(model_->grads());
  sync_s_ = seconds_since(t0);
  return shard_;
}

void StageWorker::gather_parameters() {
  if (hosted()) {
    const auto t0 = std::chrono::steady_clock::now();
    comms_.ordered_reduction->gather(rank_.dp);
    sync_s_ += seconds_since(t0);
    return;
  }
  if (stages_collectives())
    throw std::logic_error("StageWorker::gather_parameters: collectives staged through the host run in two parts "
                           "(issue_parameters_to_host, gather_parameters_on_host)");
  if (parameter_collective_range().begin == parameter_collective_range().end) return;
  const auto t0 = std::chrono::steady_clock::now();
  gather_parameters_at(model_->params());
  sync_s_ += seconds_since(t0);
}

}  // namespace troupe::engine
