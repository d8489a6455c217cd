// The small model of the acceptance ladder, derived from an operator's config: the
// same parallel layout (data, pipeline, tensor, context, schedule, sequence
// parallelism, distributed optimizer) and the same shape of a step (micro batch,
// microbatches per replica up to a cap), with a model small enough that every rung
// runs in seconds on a CPU:
//
//   model.layers       2 per pipeline stage (never more than the config's layers)
//   model.heads        2, or TP when TP > 2 (heads must divide over TP)
//   model.width        16 per head (head size 16; a Llama whose model.head_dim is not
//                      width / heads keeps heads wider (24) or narrower (8) than that)
//   model.ffn_width    4 x width
//   model.vocab_size   257: the acceptance dataset is bytes + EOD (acceptance/dataset.h);
//                      vocab_pad_multiple, init_std, layernorm_eps are the config's
//   batch.seq_length   32 (max_positions 32)
//   micro_batch_size   min(config's, 2)
//   microbatches       min(config's per replica, max(2 x PP, 4)): at least enough to
//                      fill the pipeline, so the schedule's steady state is exercised
//   global batch       micro batch x microbatches x DP
//   optimizer          lr 1e-3 -> min_lr 1e-4 (the parity tolerances assume it), warmup
//                      over the first update; betas, eps, weight decay and clipping are
//                      the config's; the config's decay style
//   data               the acceptance dataset, packed with pad_to_boundary (so windows
//                      hold long documents, two short documents, and padding)
//   device             CPU, 1 compute thread per stage (the reference uses 1 too)
//   seed               the config's
#pragma once

#include <cstdint>
#include <string>

#include "messages/config.pb.h"

namespace troupe::acceptance {

inline constexpr int kSmallSeqLength = 32;

struct SmallModel {
  Config config;          // ready to run, except run_dir / train_samples / checkpoints per run
  std::string derivation;  // Markdown lines "- field: small value (config: value; rule)"
};

// `data_prefix`: the acceptance dataset (acceptance/dataset.h). Throws
// std::invalid_argument when the layout has more stage ranks than `max_ranks`
// (every rank is a thread of this process).
SmallModel derive_small_model(const Config& config, const std::string& data_prefix, int max_ranks);

// A copy of `base` for one run: its own run directory under `runs_root`, `updates`
// updates of the base's global batch, no checkpoints, no evaluation, no TensorBoard,
// quiet console settings.
Config for_run(const Config& base, const std::string& runs_root, const std::string& name, int64_t updates);

// Whether a config's own model is small enough to be measured on this CPU within the
// acceptance run (capacity and calendar rungs): at most 16 stage ranks, counted
// main state at most 2 GB, and about 1e12 FLOPs per update (6 x params x tokens).
bool cpu_sized(const Config& config, std::string* why_not = nullptr);

}  // namespace troupe::acceptance
