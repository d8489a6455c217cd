// The planner: a run's arithmetic for one config, as numbers (docs/planner.md).
// `supervisor plan` prints them (sched/planner_report.h); tests pin them against the
// reference numbers (docs/planner.md, "The reference numbers").
// Token counts are input tokens: samples x seq_length.
// Counts are exact int64; a count that does not fit throws std::overflow_error naming
// the fields and numbers it is made of (never a wrapped, negative number).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::sched {

// Causal attention position pairs in one sequence of L tokens: L(L+1)/2.
int64_t causal_pairs(int64_t seq_length);

// x rounded up to `digits` significant decimal figures (9,999,986,196,480 -> 1.0e13).
int64_t round_up_significant(int64_t x, int digits);

// Full updates needed to cover `tokens`: ceil(tokens / tokens_per_update).
int64_t updates_covering(int64_t tokens, int64_t tokens_per_update);

// The token budget and how the training length meets it.
struct TokenPlan {
  int64_t budget = 0;           // training.token_budget, or derived (see budget_derived)
  bool budget_derived = false;  // true: train tokens rounded up to 2 significant figures
  int64_t full_updates = 0;     // train_samples / global batch, rounded down
  int64_t samples = 0;          // full_updates x global batch
  int64_t tokens = 0;           // samples x seq_length
  int64_t shortfall = 0;        // budget - tokens (negative: past the budget)
};
// `budget_override` (> 0) replaces training.token_budget.
TokenPlan token_plan(const Config& c, int64_t budget_override = 0);

struct WarmupPlan {
  int64_t samples = 0;  // lr_schedule.warmup_samples
  int64_t updates = 0;  // full updates that cover them (rounded up)
  int64_t tokens = 0;   // updates x tokens per update
};
WarmupPlan warmup_plan(const Config& c);

// The LR at the end of warmup, at the midpoint of the decay phase, and at its end
// (sample positions as in sched/lr_schedule.h), and the first update that applies the
// schedule at or past each: update k applies it at the (k - 1) x global_batch samples
// consumed before it (Megatron's convention), so that is ceil(sample / global_batch) + 1.
struct LrPoints {
  int64_t warmup_end_sample = 0, midpoint_sample = 0, end_sample = 0;
  int64_t warmup_end_update = 0, midpoint_update = 0, end_update = 0;
  double warmup_end = 0, midpoint = 0, end = 0;
};
LrPoints lr_points(const Config& c);

// One decoupled AdamW step on a single parameter with Adam update `u` (mhat /
// (sqrt(vhat) + eps)) : p * (1 - lr * wd), then minus lr * u.
struct AdamwStep {
  double after_decay = 0, after_update = 0;
};
AdamwStep adamw_step(double p, double u, double lr, double weight_decay);

// Parameters each GPU holds with equal sharding: parameter_count / (TP x PP).
double params_per_gpu(const Config& c);

// Main state bytes per GPU (Megatron Core accounting): bf16 weights + fp32 gradients
// (6 bytes) on every rank, fp32 master + two Adam moments (12 bytes) sharded over DP
// when the optimizer is distributed:  params_per_gpu x (6 + 12 / DP).  Excludes
// activations, communication buffers and uneven shards.
double main_state_bytes_per_gpu(double params_per_gpu, int64_t data_parallel,
                                bool distributed_optimizer = true);

// Tensor-parallel traffic of one microbatch, as troupe runs it (Megatron-LM's layout,
// docs/compute.md). A = b x s x h activation elements x bytes_per_element (bf16: 2).
// Per transformer layer, one microbatch:
//   without sequence parallelism: forward 2 all-reduces of A (attention and MLP
//     outputs, after the row-parallel layers); backward 2 all-reduces of A (the input
//     gradients of the column-parallel layers);
//   with sequence parallelism: forward 2 all-gathers (ln_1 and ln_2 outputs, before
//     the column-parallel layers) + 2 reduce-scatters (after the row-parallel ones);
//     backward 2 all-gathers (the residual gradient before each row-parallel layer)
//     + 2 reduce-scatters (the column-parallel input gradients).
// Bytes a rank sends with ring algorithms: 2 (t-1)/t A per all-reduce, (t-1)/t A per
// all-gather or reduce-scatter, so both modes move 8 (t-1)/t A per layer; sequence
// parallelism saves activation memory, not traffic.
// The first stage adds the vocabulary-parallel embedding (forward: an all-reduce, or
// a reduce-scatter then under SP a backward all-gather: 2 (t-1)/t A either way); the
// last stage adds ln_f (SP: forward all-gather + backward reduce-scatter; else a
// backward all-reduce: 2 (t-1)/t A) and the loss: an all-gather of 3 fp32 partials
// (max, sum of exps, target logit) per token, (t-1) x 12 b s bytes, never the logits.
struct TpCommPlan {
  int64_t tensor = 1;
  bool sequence_parallel = false;
  int bytes_per_element = 2;
  int64_t activation_bytes = 0;        // A
  int all_reduces = 0;                 // per layer, forward + backward
  int all_gathers = 0, reduce_scatters = 0;
  int64_t layer_bytes = 0;             // sent per rank, per layer, per microbatch
  int64_t layers_per_stage = 0;
  int64_t stage_bytes = 0;             // layers_per_stage x layer_bytes
  int64_t embedding_bytes = 0;         // first stage extra, per microbatch
  int64_t head_bytes = 0;              // last stage extra (ln_f and the loss), per microbatch
  int64_t microbatches = 0;            // per data-parallel group and update
  int64_t update_bytes = 0;            // a middle stage's rank per update: stage_bytes x microbatches
};
TpCommPlan tp_comm_plan(const Config& c, int bytes_per_element = 2);

// One row of the layout table: the config's TP x PP x CP with another DP.
struct Layout {
  int64_t data_parallel = 0;
  int64_t gpus = 0;                  // TP x PP x CP x DP
  std::optional<int64_t> microbatches;  // per DP group; empty when DP does not divide the batch
  double pipeline_idle = 0;          // (p-1)/(m+p-1); 0 when microbatches is empty
  double main_state_bytes = 0;       // per GPU
};
Layout layout_for(const Config& c, int64_t data_parallel);

// Days of pure compute for `tokens` at `tokens_per_s`, and calendar days when only
// `efficiency` of wall time is training (throughput measured over training time only).
struct Calendar {
  double compute_days = 0, calendar_days = 0;
};
Calendar calendar(double tokens, double tokens_per_s, double efficiency);

// Measured throughput at a cluster size (tokens_per_s empty: not measured yet).
struct ScalingPoint {
  int64_t gpus = 0;
  std::optional<double> tokens_per_s;
};
// Speed-up and scaling efficiency of a step between two measured points:
// speedup = tps_b / tps_a, efficiency = speedup / (gpus_b / gpus_a).
struct ScalingStep {
  double speedup = 0, efficiency = 0;
};
ScalingStep scaling_step(const ScalingPoint& a, const ScalingPoint& b);

// Reads "GPUs [tokens_per_s]" rows ('#' comments, blank lines skipped). Rows must
// ascend in GPUs. Throws std::runtime_error "<path>:<line>: ..." on bad input.
std::vector<ScalingPoint> parse_scaling(const std::string& text, const std::string& source);
std::vector<ScalingPoint> read_scaling_file(const std::string& path);

}  // namespace troupe::sched
