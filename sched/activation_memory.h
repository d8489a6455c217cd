// The planner's activation term: the bytes one pipeline stage holds for its
// in-flight microbatches, per recompute mode, as troupe lays them out
// (model/gpt_stage.h; docs/compute.md "Recomputation"; docs/planner.md "Activation
// memory"). Every figure is fp32, 4 bytes a float (the CPU device and the CUDA
// device both keep activations in fp32: docs/gpu.md), and counts the bytes the
// stage asks for; a device rounds each block up (CPU 64 bytes, CUDA 256), so a
// measured figure exceeds it by less than that per block (by nothing when the block
// sizes are multiples of it).
//
// With n = B x T (micro batch x sequence length, the slot's capacity), r = n / TP
// under sequence parallelism (else n) the residual rows a rank holds, D the width,
// Dt = D / TP, Ft = ffn / TP, NHt = heads / TP, hs the head size (D / heads, or a
// Llama's model.head_dim), KVl = kv_heads / TP (1 when kv_heads does not split),
// floats saved by one transformer layer:
//   2 n D + r D                          the two norms' outputs (gathered) and h
//   + 2 x norm statistics                LayerNorm 2 r, RMSNorm r
//   + attention: qkv n (NHt + 2 KVl) hs  (GPT-2: n 3 Dt) + output n NHt hs
//                + probabilities B NHt T^2 (not under SELECTIVE)
//   + MLP: GELU 2 n Ft (SELECTIVE: n Ft), SwiGLU 3 n Ft (SELECTIVE: 2 n Ft)
// and one slot: the residual stream (L + 1) r D, the layers whose activations it
// keeps (FULL: UNIFORM none, BLOCK the layers past the first recompute_num_layers),
// on the last stage ln_f's output n D, its statistics, the logits n (padded vocab /
// TP), lse and losses 2 n; the token ints and loss mask 5 n. Under ZB_H1 a slot also
// keeps the output gradients its weight pass reads: per layer 2 n D + n x (qkv width)
// + n Ft (GELU; SwiGLU none), and n D on the first stage.
// ZB_H1's in-flight count runs from the forward to the weight pass (peak_in_flight).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/config.pb.h"
#include "sched/pipeline_schedule.h"

namespace troupe::sched {

// Activation slots a stage allocates for a peak of `in_flight` microbatches of its
// schedule (slot = microbatch mod slots): GPipe one per microbatch; 1F1B one more
// than its peak, at most m, so that an output or input gradient handed to a
// neighbour by pointer outlives the next forward into its slot.
int32_t activation_slots(ParallelConfig::Schedule kind, int32_t in_flight, int32_t microbatches);

// With v model chunks a stage (the interleaved schedule) every slot holds one chunk's
// L / v layers, each chunk has slots of its own (sched/slot_reuse.h), and only the last
// stage's last chunk's slots hold the head's part.
struct StageActivations {
  int32_t stage = 0;
  int32_t layers = 0;          // transformer layers of the stage
  int32_t chunks = 1;          // model chunks (v)
  int32_t stored_layers = 0;   // of a chunk's layers, the ones whose activations a slot keeps
  int32_t in_flight = 0;       // peak in flight, from the stage's op list
  // activation_slots(kind, in_flight, m); with chunks their sum; ZB_H1 and chunks:
  // proven from the op lists (sched/slot_reuse.h)
  int32_t slots = 0;
  std::vector<int32_t> chunk_slots;  // per chunk
  int64_t layer_bytes = 0;     // one stored layer's saved bytes, per slot
  int64_t slot_bytes = 0;      // everything one slot saves (the largest slot with chunks)
  int64_t deferred_bytes = 0;  // of those, ZB_H1's output gradients kept for the weight pass
  int64_t saved_total_bytes = 0;  // every slot's
  // Bytes of the temporaries the slots share (dres, the layers' workspace, the hidden
  // dropout's masked rows, the recompute and replay buffers) plus the input gradient
  // each slot hands back (non-first stages). Excludes tensor-parallel buffers, the
  // rotary tables and the device's kernel scratch.
  int64_t scratch_bytes = 0;
  int64_t saved_bytes() const { return saved_total_bytes; }
};

// Stage `stage` of c's pipeline under c's own model.recompute settings, with the
// in-flight count taken from `schedule` (c's parallel.schedule over m microbatches).
StageActivations stage_activations(const Config& c, int32_t stage, const PipelineSchedule& schedule);
// Every stage of c, the schedule built from c (build_pipeline_schedule).
std::vector<StageActivations> activation_plan(const Config& c);

// One recompute setting: NONE, SELECTIVE, or FULL BLOCK of `layers` layers per stage
// (FULL of every layer of a stage: UNIFORM).
struct RecomputeChoice {
  ModelConfig::Recompute mode = ModelConfig::NONE;
  int32_t layers = 0;  // FULL only
  std::string str() const;  // "none", "selective", "full 3 layers"
  Config applied_to(const Config& c, int32_t stage_layers) const;
};

// Whether each stage fits `gpu_bytes` and with what: candidates in the order NONE <
// SELECTIVE < FULL of 1, 2, ... layers; the first whose stage total fits. The total
// is troupe's bytes on the device: fp32 weights and gradients (8 bytes a parameter of
// the stage's equal share, params / (TP x PP)), fp32 Adam moments (8, over DP with
// the distributed optimizer), the saved activations and the shared scratch above.
struct StageFit {
  int32_t stage = 0;
  double main_state_bytes = 0;
  bool fits = false;
  RecomputeChoice choice;      // when fits
  StageActivations activations;  // of the choice (when fits) or of full uniform (when not)
  double total_bytes = 0;      // main state + saved activations + scratch of that
};
std::vector<StageFit> fit_recompute(const Config& c, double gpu_bytes);

// "141GB", "141 GB", "80GiB", "1.5e11" (bytes) -> bytes. GB = 1e9, GiB = 2^30.
// Throws std::invalid_argument naming the text.
double parse_memory_size(const std::string& text);

}  // namespace troupe::sched
