// A model object for a layer range of the config: a pipeline stage, or the whole
// model when the range is [0, layers). No actors here; the stage actor of the
// runtime owns one of these and calls it from its own thread.
//
// Composed of layers (model/layers, chosen per model.architecture by
// model/architecture.h): Embedding on the first stage, one Block per layer (norm,
// attention, norm, MLP), the final Norm, Head and Loss on the last; tensor and
// sequence parallelism live inside them. GPT-2: x0 = wte[token] + wpe[position];
// per block x = x + c_proj(attn(ln_1(x))); x = x + mlp.c_proj(gelu(mlp.c_fc(ln_2(x))));
// then ln_f and logits = ln_f(x) wte^T. Llama: x0 = embed_tokens[token]; per block
// x = x + o_proj(gqa(rope(q, k), v)(input_layernorm(x))); x = x + down(silu(gate) *
// up)(post_attention_layernorm(x)); then norm and lm_head (or embed_tokens, tied).
// Logits cover the vocab_size real rows (padded rows are never predicted).
// Attention is causal and restricted to the token's own document
// (Microbatch::segments). (The class keeps its first family's name.)
//
// Buffers: parameters and gradients are two flat fp32 device buffers laid out by
// registry(). Gradients accumulate (+=) over backward calls; zero_grads() is explicit.
// Rounding follows the order of backward calls (the embedding gradient adds token
// rows one by one), so runs that must agree bit for bit call backward in the same
// microbatch order.
//
// Activation slots: the stage holds `slots` in-flight microbatches (1F1B needs up
// to p - k at stage k, GPipe m; with model chunks, each chunk has slots of its own). forward(slot, ...) saves in that slot everything
// backward(slot) needs; a slot is free again once its backward has run. Slots are
// allocated up front; forward and backward allocate nothing.
//
// The loss contract (docs/numerics.md, "Loss of a step"): the last stage returns the SUM of
// per-token cross-entropy over loss-bearing tokens of the microbatch and their
// count. backward seeds d(loss)/d(logit) with loss_mask / mb.global_loss_tokens, so
// the gradients of all microbatches of a step add up to the gradient of
//   loss = (sum over the global batch of per-token losses) / global_loss_tokens.
//
// Inputs and outputs between stages (all [B*T, D] row-major fp32, device memory):
//   first stage:  forward(slot, mb)             input from mb.tokens/positions
//   other stages: forward(slot, mb, input)      `input` is copied into the slot; it
//                                               need only live during the call
//   non-last:     output(slot)                  valid from forward(slot) until the
//                                               next forward into the same slot
//   non-last:     backward(slot, grad_output)   copied at the start of the call
//   non-first:    input_grad(slot)              valid from backward(slot) until the
//                                               next forward into the same slot
// Every stage needs the microbatch (segments build the attention mask in every
// block, and rotary positions read mb.positions in every block; the last stage also
// reads targets, loss_mask and global_loss_tokens). A
// microbatch may have fewer rows (and a shorter T) than the stage's capacity.
//
// One thread at a time per stage; distinct stages may run concurrently.
//
// Tensor parallelism (model/tensor_parallel.h; docs/compute.md): constructed with a
// TensorParallel group of T > 1, the stage holds rank t's slices (registry()) and
// runs its collectives inside forward and backward, so the T stages of a group must
// be driven with the same calls in the same order, each from its own thread.
//   - every rank of the group takes the same whole microbatch;
//   - the last stage of every rank returns the same loss (vocabulary-parallel
//     cross-entropy: only per-token max, sum of exps and target logit are exchanged);
//   - without sequence parallelism the activations handed between pipeline stages
//     are the whole [B*T, D], identical on every rank; WITH sequence parallelism they
//     are the rank's sequence shard: token rows [t*N/T, (t+1)*N/T) of [N = B*T, D]
//     (activation_rows(B, T) rows), and so is the input gradient;
//   - under sequence parallelism the LayerNorm weight gradients of each rank cover
//     its rows only: call reduce_tensor_parallel_grads() once after the last backward
//     of a step (no-op otherwise) before the gradients are used.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "kernels/buffer.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"
#include "model/param_registry.h"
#include "model/stage_range.h"
#include "model/tensor_parallel.h"

namespace troupe::model {

class Block;
namespace layers {
class Embedding;
class WeightGradQueue;
class Rope;
class Norm;
class Head;
class Loss;
}  // namespace layers

struct StageLoss {
  double loss_sum = 0;      // sum of per-token losses (last stage; 0 elsewhere)
  int64_t loss_tokens = 0;  // loss-bearing tokens of the microbatch (last stage; 0 elsewhere)
};

// The loss sum of a microbatch from its n per-token losses (host memory): in double,
// in token order, so the sum is fixed by the microbatch.
double sum_token_losses(const float* losses, int64_t n);

// Capacity of one activation slot.
struct StageShape {
  int micro_batch = 0;  // max rows B per microbatch
  int seq = 0;          // max positions T
  static StageShape from_config(const Config& c) {
    return {c.batch().micro_batch_size(), c.batch().seq_length()};
  }
};

class GptStage {
 public:
  // Parameters are initialised from (training.seed, tensor name) (model/init.h).
  // `spec`: the model's piece of the run (model/model_spec.h; a Config converts to it).
  GptStage(const ModelSpec& spec, StageRange range, kernels::Device& device, int slots, StageShape shape,
           TensorParallel tp = {});
  // A stage of several model chunks (the interleaved schedule; model/stage_range.h):
  // chunk c gets chunk_slots[c] activation slots of its own, numbered after the
  // earlier chunks' (slot_base(c) + i). A slot belongs to one chunk: forward(slot)
  // runs that chunk's blocks (the embedding first on chunk 0 of the first stage; the
  // final norm, head and loss after the last chunk of the last stage), and its input,
  // output and gradients are that chunk's. One chunk: the constructor above.
  GptStage(const ModelSpec& spec, StageLayers layers, kernels::Device& device, std::vector<int> chunk_slots,
           StageShape shape, TensorParallel tp = {});
  // The activation capacity of the run's batch (StageShape::from_config).
  GptStage(const Config& c, StageRange range, kernels::Device& device, int slots = 1)
      : GptStage(c, range, device, slots, StageShape::from_config(c)) {}
  ~GptStage();
  GptStage(const GptStage&) = delete;
  GptStage& operator=(const GptStage&) = delete;

  const ParameterRegistry& registry() const { return registry_; }
  // The one layer range of a single-chunk stage (std::logic_error with several).
  StageRange range() const { return registry_.range(); }
  const StageLayers& layers() const { return registry_.layers(); }
  bool is_first() const { return layers().has_embedding(); }
  bool is_last() const { return last_; }
  int slots() const;  // over every chunk
  int chunks() const { return layers().count(); }
  int chunk_slots(int chunk) const { return chunk_slots_.at(size_t(chunk)); }
  int slot_base(int chunk) const { return slot_base_.at(size_t(chunk)); }
  // Whether chunk `chunk` takes the microbatch's tokens (no input activations) /
  // ends in the loss (no output gradient): chunk 0 of the first stage / the last
  // chunk of the last stage.
  bool chunk_is_first(int chunk) const { return is_first() && chunk == 0; }
  bool chunk_is_last(int chunk) const { return last_ && chunk == chunks() - 1; }
  StageShape shape() const { return shape_; }
  kernels::Device& device() { return device_; }
  const TensorParallel& tensor_parallel() const { return tp_.collectives().config(); }
  // Rows of the activations handed to / from neighbouring stages for a microbatch of
  // B x T: B*T, or B*T / tensor-parallel size under sequence parallelism.
  int64_t activation_rows(int B, int T) const;
  // Sums over the group the gradients of replicated weights each rank computed from
  // its own share: the norms' under sequence parallelism (each rank's rows), and a
  // grouped-query attention's replicated k and v (each rank's query heads). Nothing
  // otherwise (every rank's replicated gradients are already identical).
  void reduce_tensor_parallel_grads();
  // Seconds this stage spent inside tensor-parallel collectives (reset by the caller).
  double tp_comm_seconds() const { return tp_.collectives().seconds(); }
  void reset_tp_comm_seconds() { tp_.collectives().reset_seconds(); }

  // Flat buffers of registry().total() floats (device memory).
  float* params() { return params_.f32(); }
  const float* params() const { return params_.f32(); }
  float* grads() { return grads_.f32(); }
  const float* grads() const { return grads_.f32(); }
  int64_t param_count() const { return registry_.total(); }
  // Pointers to one named tensor in each buffer.
  float* param(std::string_view name) { return params() + registry_.at(name).offset; }
  float* grad(std::string_view name) { return grads() + registry_.at(name).offset; }

  void zero_grads();
  // Re-runs the deterministic initialisation (model/init.h) into params().
  void init_parameters();
  // The same initial values written into host memory (registry().total() floats).
  void init_parameters_into(float* host) const;

  // Runs the forward of microbatch mb in `slot` and, on the last stage, reads its
  // per-token losses back and sums them (waits for the device).
  StageLoss forward(int slot, const data::Microbatch& mb, const float* input = nullptr);
  // The same forward without the read-back, so the caller never waits for the device:
  // token_losses(slot) holds the losses once the device gets there. Returns the
  // microbatch's loss-bearing tokens (last stage; 0 elsewhere), counted on the host.
  int64_t issue_forward(int slot, const data::Microbatch& mb, const float* input = nullptr);
  // `block_done`, when given, is called with each block's flat range once the kernels
  // that add this microbatch's gradients to it are issued (blocks from last to first):
  // after the last microbatch's backward those gradients are final, and their
  // data-parallel reduction can start while the earlier blocks' backward runs.
  void backward(int slot, const float* grad_output = nullptr,
                const std::function<void(FlatRange)>& block_done = {});

  // The same backward split in two passes (ZB-H1, parallel.schedule ZB_H1; the stage
  // must have been built with that schedule, so its slots hold what the second pass
  // needs; docs/compute.md, "Split backward"):
  //   backward_input(slot, grad_output): everything but the weight-gradient GEMMs of
  //     the linear layers (and the embedding's scatter-add): the input gradient
  //     (input_grad(slot) on return), the norms' and biases' gradients. Each linear's
  //     output gradient is kept in the slot (slot_deferred_floats()).
  //   backward_weight(slot, block_done): the deferred GEMMs, in the order backward()
  //     issues them; block_done as backward's (blocks from last to first), called here
  //     since here the blocks' gradients are complete. The slot is free afterwards.
  // backward_input then backward_weight adds the same bits to grads() as backward(),
  // and any interleaving of other microbatches' passes between them leaves each
  // parameter's additions in microbatch order as long as each pass kind runs in
  // microbatch order (the norms' and biases' in B order, the rest in W order).
  void backward_input(int slot, const float* grad_output = nullptr);
  void backward_weight(int slot, const std::function<void(FlatRange)>& block_done = {});
  // Whether the stage was built for the split backward (parallel.schedule ZB_H1).
  bool split_backward() const { return split_; }

  const float* output(int slot) const;      // non-last stages
  const float* input_grad(int slot) const;  // non-first stages

  // Inspection (last stage), valid after forward(slot) and until backward(slot),
  // which turns the logits into their gradient in place:
  //   logits [B*T, padded_vocab] (vocab_size valid columns), token_losses [B*T].
  // Under tensor parallelism the logits are the rank's columns [B*T, padded_vocab/T]
  // (vocabulary ids from registry().vocab_begin()); the losses are whole.
  const float* logits(int slot) const;
  const float* token_losses(int slot) const;

  // Floats held per activation slot (what the forward saves, plus the input gradient
  // handed back on non-first stages), of those the saved ones (kActivations in the
  // device's memory ledger: 4 bytes each), and the scratch shared by all slots. With
  // several chunks: the largest slot's (the last stage's last chunk keeps the logits);
  // all_slot_floats() adds up every slot.
  // Under the split backward the saved floats include slot_deferred_floats(), the
  // output gradients kept from backward_input to backward_weight.
  int64_t slot_floats() const { return slot_floats_; }
  int64_t slot_saved_floats() const { return slot_saved_floats_; }
  int64_t slot_deferred_floats() const { return slot_deferred_floats_; }
  int64_t scratch_floats() const { return scratch_floats_; }
  int64_t all_slot_floats() const { return all_slot_floats_; }
  // Tensor-parallel buffers besides the scratch: ones [BT] for the QKV bias pieces and,
  // with sequence parallelism, the LayerNorm gradient staging (0 without TP).
  int64_t tp_buffer_floats() const { return tp_.buffer_floats(); }
  // Tables the blocks share: the rotary cos and sin, [max_positions, hs/2] each (0 without).
  int64_t table_floats() const;

 private:
  struct Slot;
  Slot& check_slot(int slot, const char* what);
  const Slot& check_slot(int slot, const char* what) const;
  void load_microbatch(Slot& s, const data::Microbatch& mb);
  // The slot's residual stream at its chunk's block boundary l (0: the chunk's input), [Nr, D].
  float* residual(Slot& s, int l) const;
  // Where the chunk's l-th block saves its activations (the replay buffer when full
  // recomputation replays it).
  float* block_saved(Slot& s, int l) const;
  bool slot_is_first(const Slot& s) const;
  bool slot_is_last(const Slot& s) const;
  layers::Workspace workspace();
  // The backward of a slot; with defer, the weight GEMMs are queued there instead
  // (backward_input), marks[l] the queue's size after local block l.
  void run_backward(Slot& s, const float* grad_output, const std::function<void(FlatRange)>& block_done,
                    layers::WeightGradQueue* defer);
  // Gradients that the tensor-parallel group sums after the last backward (Block::partial_grads).
  std::vector<layers::TpContext::Span> partial_grads() const;

  uint64_t seed_;
  kernels::Device& device_;
  ParameterRegistry registry_;
  StageShape shape_;
  bool last_;
  int D_, V_, P_;
  // The tensor-parallel group as the layers see it (TP = 1: every operation a no-op).
  layers::TpContext tp_;
  kernels::Buffer params_, grads_;
  // The layers over params_ and grads_ (model/architecture.h): the embedding on the
  // first stage, one Block per layer of the range, final norm, head and loss on the last.
  std::unique_ptr<layers::Embedding> embedding_;
  std::unique_ptr<layers::Rope> rope_;  // rotary tables the blocks share (LLAMA)
  std::vector<std::unique_ptr<Block>> blocks_;  // every chunk's, in chunk order
  std::vector<int> chunk_first_block_;           // chunk c's blocks start at this index
  std::vector<int> chunk_slots_, slot_base_;     // per chunk
  std::unique_ptr<layers::Norm> final_norm_;
  std::unique_ptr<layers::Head> head_;
  std::unique_ptr<layers::Loss> loss_;
  std::vector<Slot> slots_;
  // dres [BT, D] | small [BT, D] | big [BT, max(3Dt, Ft, 3T)] (Workspace; big also
  // holds the gathered cross-entropy partials) | masked [BT, D] (hidden dropout) |
  // recompute (selective recomputation) | one block's saved floats and its output
  // [BTr, D] (full recomputation: where a recomputed block replays its forward).
  kernels::Buffer scratch_;
  // Per layer of a chunk (the l-th block of every chunk alike: Megatron applies
  // recompute_num_layers per model chunk): its place among the layers whose saved
  // activations live in the slot, or -1 when full recomputation replays it in backward
  // (model.recompute).
  std::vector<int64_t> stored_at_;
  int64_t masked_off_ = -1, recompute_off_ = -1, replay_saved_off_ = -1, replay_out_off_ = -1;
  // Host staging, sized once: microbatch IDs on the way in, per-token losses out.
  std::vector<int32_t> host_ints_;
  std::vector<float> host_losses_;
  int64_t slot_floats_ = 0, slot_saved_floats_ = 0, scratch_floats_ = 0, all_slot_floats_ = 0;
  int64_t slot_deferred_floats_ = 0;
  bool split_ = false;
};

}  // namespace troupe::model
