// One stage rank's compute, without actors: its model stage (a layer range on its
// own device), its activation slots, and the collectives that end a step. The stage
// actor owns one and calls it from its own thread in the order its pipeline schedule
// gives; nothing here decides order or talks to other actors.
//
// Tensor parallelism: the stage's model gets RankComms::tensor_parallel (when
// parallel.tensor > 1) and parallel.sequence_parallel; its forward and backward run
// the group's collectives in op order (model/tensor_parallel.h).
//
// End of a step (the order every rank of a group follows, so collectives match):
//   0. the partial gradients of replicated weights (the norms under sequence
//      parallelism, a grouped-query attention's replicated k and v) are summed over
//      the TP group;
//   1. tied embeddings with pp > 1: the first and the last stage all-reduce their
//      token embedding (wte.weight / model.embed_tokens.weight) gradients over the
//      embedding group (each ends with the sum);
//   2. data parallel: the flat gradient buffer is reduce-scattered in place over the
//      DP group, so chunk r of rank r holds the DP sum (distributed optimizer), or
//      all-reduced (every rank holds the sum) without it;
//   3. the optimizer shard updates the parameters of its chunk (optimizer_shard.h);
//   4. with the distributed optimizer, the chunks are all-gathered in place, so every
//      replica holds the same updated parameters again.
//
// On a GPU (a CUDA rank device) with device communicators (NCCL groups, when every rank
// has a GPU of its own: engine/rank_device.h, make_group_comms), steps 1, 2 and 4 are
// issued on device memory in place: each runs on the device's communication stream
// after the work issued so far, the compute stream waits for it, and nothing waits on
// the host. With in-process communicators (they read and write host memory) they run
// on a page-locked host copy of the buffer that is copied back afterwards (correct, not
// fast). Neither copy waits for the device: the actor issues the copy out, runs the
// collectives from a message it sends itself from a when_done fn, and the copy back is
// ordered before everything issued after it (stages_collectives() below).
// Device memory handed to another actor must be complete first: the actors send a
// pointer into it from device().when_done (at once on the CPU, from the GPU's
// completion callback on a GPU), or after finish_device_work() where the send itself
// reads the memory (a communicator to another process). Slot reuse stays safe on a
// GPU: a neighbour's next message comes after everything it issued before, including
// its reads of a handed-over slot.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/topology.h"
#include "kernels/device.h"
#include "messages/runtime.h"
#include "model/gpt_stage.h"
#include "sched/activation_memory.h"
#include "sched/pipeline_schedule.h"

namespace troupe::engine {

// Activation slots stage `pp` needs so that an output or input-gradient handed to a
// neighbour by pointer stays valid until the neighbour has copied it: with
// round-robin slots (slot = microbatch mod slots) GPipe uses one per microbatch and
// 1F1B uses p - pp + 1 (its peak of p - pp in flight, plus one), at most m.
int activation_slots(ParallelConfig::Schedule schedule, int pipeline, int pp, int microbatches);
// The layers of rank r's stage: its range, or its model chunks (parallel.virtual_stages).
model::StageLayers stage_layers(const Config& c, const Rank& r);

// The tensor-parallel slice of rank r (ParameterRegistry's {tp, parallel.tensor}).
model::TensorSlice tensor_slice(const Config& c, const Rank& r);
// The parameter layout of rank r's stage: its layer range and tensor-parallel slice.
// The optimizer shard of the same rank must use this layout (flat ranges, norm
// ranges, checkpoint boxes).
model::ParameterRegistry stage_registry(const Config& c, const Rank& r);

// The last stage's per-token losses, read back into host memory without waiting (see
// StageWorker::forward). The values are there inside a device().when_done fn issued
// after the forwards; the handle keeps the memory alive past a restart.
struct LossReadback {
  std::shared_ptr<const float> host;  // microbatch mb's losses start at mb * stride
  int64_t stride = 0;
  // The loss sum of microbatch mb's first `rows` tokens (model::sum_token_losses).
  double sum(int mb, int64_t rows) const;
  // Microbatch mb's losses by packed segment of `batch` (engine::segment_losses).
  std::vector<msg::SegmentLoss> segments(int mb, const data::Microbatch& batch) const;
};

// What one stage rank reads of the configuration (StageSpec::of): the stage actor and
// its StageWorker receive this piece, not the Config; the model gets `model` alone.
struct StageSpec {
  Rank rank;
  model::ModelSpec model;                // the model's piece (model/model_spec.h)
  model::StageLayers layers;             // the rank's layers, or its chunks (stage_layers)
  model::StageShape shape;               // the batch's activation capacity (micro batch, seq)
  sched::StageActivations activations;   // the stage's slots per chunk, as the planner's ledger counts them
  Topology layout;                       // the logical layout
  bool distributed_optimizer = true;     // parallel.distributed_optimizer
  bool sequence_parallel = false;        // parallel.sequence_parallel
  double heartbeat_interval_s = 0;       // supervision.heartbeat_interval_s
  std::string init_from;                 // training.init_from (empty: the seed's weights)
  // The verified op lists of every stage (sched::verified_pipeline_schedule), one copy
  // shared by the run's stages.
  std::shared_ptr<const sched::PipelineSchedule> schedule;
  static StageSpec of(const Config& c, const Rank& r, std::shared_ptr<const sched::PipelineSchedule> schedule);
};

class StageWorker {
 public:
  // `device`: the rank's device (engine/rank_device.h), shared with its optimizer shard.
  StageWorker(const StageSpec& spec, RankComms comms, std::shared_ptr<kernels::Device> device);
  // The same from a whole Config (tests, the acceptance ladder's measurement); null
  // `device`: a device of its own (make_rank_device).
  StageWorker(const Config& c, Rank rank, RankComms comms, std::shared_ptr<kernels::Device> device = nullptr);

  const Rank& rank() const { return rank_; }
  model::GptStage& model() { return *model_; }
  kernels::Device& device() { return *device_; }
  // Waits until every kernel this rank's device was given has finished (GPU; the CPU
  // device has nothing pending).
  void finish_device_work() { device_->synchronize(); }
  // Where a device communicator receives a pipeline neighbour's values for this
  // stage's next op (cluster mode on GPUs): one buffer per side of n floats, made on
  // first use (the only allocation: n is the same every microbatch), valid until the
  // next receive into it.
  enum class Inbox { kActivations, kGradients };
  float* inbox(Inbox side, int64_t n);
  bool is_first() const { return model_->is_first(); }
  bool is_last() const { return model_->is_last(); }
  // Model chunks (parallel.virtual_stages under the interleaved schedule; else 1) and
  // whether a chunk starts from the tokens / ends in the loss (GptStage::chunk_is_*).
  int chunks() const { return model_->chunks(); }
  bool chunk_is_first(int chunk) const { return model_->chunk_is_first(chunk); }
  bool chunk_is_last(int chunk) const { return model_->chunk_is_last(chunk); }

  // Zeroes the gradients and starts measuring the device's memory peak afresh: the
  // start of every training step.
  void begin_step();

  // A physical replica hosting several logical ones (RankComms::ordered_reduction;
  // engine/hosted_stage.h): its hosted ranks' workers share one model (weights,
  // gradients, activation slots) and take turns, one logical replica's ops at a time.
  bool hosted() const { return comms_.ordered_reduction != nullptr; }
  // Whether this worker made the shared model (it alone loads the weights); true
  // when the model is its own.
  bool made_model() const { return made_model_; }
  // The start of this logical replica's turn: zeroes the gradients; the step's first
  // turn (round 0) also starts the memory peak afresh.
  void begin_round(bool first);
  // After this replica's last op: steps 0 and 1 below, then its addition to the
  // ordered reduction (blocks until it has added to every shard in logical order).
  void contribute_gradients();
  // After the physical replica's last round contributed: waits for the shards it owns
  // and puts their sums into the gradient buffer, where the hosted optimizer shards
  // read their ranges.
  void finish_reduction();
  // The device's memory at its highest since begin_step, by category, beside the
  // planner's saved-activation bytes for this stage (sched::stage_activations). With
  // a device shared with the optimizer shard, its moments are in optimizer_state.
  msg::StageMemory memory_peak();

  // Forward of microbatch `mb` through model chunk `chunk` (slot mb mod the chunk's
  // slots). `input` ([B*T, D], the previous virtual stage's output) is copied before
  // this returns; null on the first stage's chunk 0. Nothing waits for the device: on
  // the last stage's last chunk the microbatch's per-token losses are read back into
  // losses() (its row mb) as the device gets there, and the return value is its
  // loss-bearing tokens (0 elsewhere).
  int64_t forward(int mb, const data::Microbatch& batch, const float* input, int chunk = 0);
  // Room in losses() for `microbatches` microbatches; called when a step starts. More
  // than before takes new host memory (handles already taken keep the old one).
  void reserve_losses(int microbatches);
  LossReadback losses() const { return {loss_host_, loss_stride_}; }
  // Backward of microbatch `mb` through chunk `chunk`; `grad_output` ([B*T, D]) null
  // on the last stage's last chunk. `last_of_chunk`: this is the step's last backward
  // of the chunk on this stage (with one chunk: the step's last backward), so each of
  // its blocks' gradients is final once its kernels are issued: with device
  // communicators and the distributed optimizer, each block's part of the
  // data-parallel reduce-scatter is issued right then and overlaps the earlier blocks'
  // backward (gradient buckets); reduce_gradients() issues the rest. The chunks' last
  // backwards come in descending chunk order (the interleaved schedule runs chunk 0's
  // last), so the buckets descend through the flat buffer either way.
  void backward(int mb, const float* grad_output, bool last_of_chunk = false, int chunk = 0);
  // The same backward in two passes (parallel.schedule ZB_H1, one chunk a stage;
  // GptStage::backward_input / backward_weight): the input pass hands back
  // input_grad(mb) and keeps the weight GEMMs' output gradients in the slot; the weight
  // pass, later, adds the weight gradients. Under the split backward the step's last
  // weight pass is what makes the blocks' gradients final: `last_of_step` there plays
  // backward's `last_of_chunk` (gradient buckets).
  bool split_backward() const { return model_->split_backward(); }
  void backward_input(int mb, const float* grad_output);
  void backward_weight(int mb, bool last_of_step);
  // Valid until the forward (output) / backward (input gradient) of microbatch mb +
  // the chunk's slots (see activation_slots).
  const float* output(int mb, int chunk = 0) const;
  const float* input_grad(int mb, int chunk = 0) const;
  int64_t width() const { return width_; }
  // Rows of output(mb) / input_grad(mb) (and of the input and output gradient handed
  // in) for a microbatch: B*T, or this rank's sequence shard B*T / TP under sequence
  // parallelism; each row is width() floats.
  int64_t activation_rows(const data::Microbatch& batch) const {
    return model_->activation_rows(batch.batch, batch.seq);
  }

  // Steps 1 and 2 above; returns the flat range this rank's optimizer shard owns
  // (the whole buffer without the distributed optimizer). Not with
  // stages_collectives() (std::logic_error): those run in the two parts below.
  model::FlatRange reduce_gradients();
  // Step 4 above (nothing without the distributed optimizer); for a hosted replica the
  // ordered reduction's gather. Not with stages_collectives() (std::logic_error).
  void gather_parameters();

  // True when the collectives run on a host copy (a GPU device with in-process
  // communicators). The actor then splits
  // each of the two calls above so that its thread never waits for the device:
  //   issue_*_to_host() issues the copy of what the collectives read into page-locked
  //     memory and returns at once; false when there is nothing to copy;
  //   *_on_host(), from a message the actor sends itself from a device().when_done fn
  //     issued after that, runs the collectives on the copy and issues the copy back.
  // Work issued after *_on_host() (the shard's update, the next step) runs after the
  // copy back, in device order.
  bool stages_collectives() const {
    return device_->kind() != kernels::DeviceKind::kCpu && !comms_.data_parallel->on_device();
  }
  bool issue_gradients_to_host();
  model::FlatRange reduce_gradients_on_host();
  bool issue_parameters_to_host();
  void gather_parameters_on_host();

  // Whether the data-parallel reduce-scatter starts in buckets during the last backward.
  bool overlaps_reduction() const;

  model::FlatRange shard_range() const { return shard_; }
  bool distributed_optimizer() const { return distributed_; }
  // Seconds spent in the two collective phases of the last step.
  double sync_seconds() const { return sync_s_; }
  // Seconds spent in tensor-parallel collectives since the step began (inside
  // forward and backward, and step 0 above).
  double tp_comm_seconds() const { return model_->tp_comm_seconds(); }

 private:
  int slot(int mb, int chunk = 0) const {
    return model_->slot_base(chunk) + mb % model_->chunk_slots(chunk);
  }
  // For a step's last backward (or weight pass): issues each block's part of the
  // data-parallel reduce-scatter as its gradients become final (buckets_).
  std::function<void(model::FlatRange)> reduce_each_block();
  // The tied-embedding group (first and last stage, pp > 1) when the head is tied to
  // the token embedding; null otherwise (an untied head's gradient is its own).
  comm::Communicator* tied_embedding_group() const;
  // The flat ranges the gradient and the parameter collectives read and write: the
  // whole buffer with data parallelism, else wte.weight with a tied-embedding group
  // (gradients only), else none.
  model::FlatRange gradient_collective_range() const;
  model::FlatRange parameter_collective_range() const;
  // Issues the copy of `range` of `device_buffer` into staging_ (same offsets).
  bool issue_to_host(const float* device_buffer, model::FlatRange range);
  // The host half: `collective` on staging_, then the copy of `range` back into
  // `device_buffer` issued; returns its seconds (0 when the range is empty).
  double collective_on_host(void (StageWorker::*collective)(float*), float* device_buffer, model::FlatRange range);
  // The collectives of steps 1 and 2 / step 4 on `grads` / `params`: the device's memory
  // (CPU, or GPU with device communicators: issued, not waited for), or staging_.
  void reduce_gradients_at(float* grads);
  void gather_parameters_at(float* params);

  Rank rank_;
  RankComms comms_;
  bool distributed_;
  int64_t width_;
  std::shared_ptr<kernels::Device> device_;  // declared before model_: outlives its buffers
  // Shared with the other hosted ranks of its physical rank when hosted().
  std::shared_ptr<model::GptStage> model_;
  bool made_model_ = true;
  model::FlatRange shard_;
  double sync_s_ = 0;
  int64_t planned_activations_ = 0;  // sched::stage_activations(c, pp).saved_bytes()
  std::shared_ptr<float> staging_;  // [param_count] page-locked host copy (GPU devices only)
  std::vector<model::FlatRange> buckets_;  // this step's, in issue order (blocks, last first)
  kernels::Buffer inboxes_[2];  // by Inbox (device memory)
  std::shared_ptr<float> loss_host_;  // [loss_capacity_, loss_stride_] (last stage)
  int64_t loss_stride_ = 0;
  int loss_capacity_ = 0;
};

}  // namespace troupe::engine
