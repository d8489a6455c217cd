// Quantities derived from a Config. Every part of troupe computes these here and
// nowhere else, so that the planner, the model and the runtime agree.
// On a validated Config no product here leaves int64: config/validate.cpp bounds every
// size they multiply (docs/configuration.md).
#pragma once

#include <cstdint>
#include <string>

#include "messages/config.pb.h"

namespace troupe::config {

// MLP inner width: model.ffn_width, or 4 * width when it is 0.
int64_t ffn_width(const ModelConfig& m);

// Key/value heads: model.kv_heads, or heads when it is 0 (GPT-2 is always multi-head).
int64_t kv_heads(const ModelConfig& m);
// Size of one attention head: model.head_dim, or width / heads when it is 0.
int64_t head_size(const ModelConfig& m);
// Query heads times the head size: the rows of q_proj and the columns of o_proj
// (width when head_dim is unset).
int64_t attention_width(const ModelConfig& m);
// Epsilon of the norms: model.norm_eps when set, else model.layernorm_eps.
float norm_eps(const ModelConfig& m);

// Embedding rows: vocab_size rounded up to a multiple of vocab_pad_multiple * tensor
// (Megatron's make-vocab-size-divisible-by). Rows past vocab_size are never predicted.
int64_t padded_vocab(const Config& c);

// Parameters of the whole model, counted once (a tied LM head adds none, an untied
// one padded_vocab x width):
//   GPT2:  token embedding padded_vocab x width, positions max_positions x width,
//          per layer 4 w^2 + 2 w f + 9 w + f (qkv, proj, fc, proj weights + biases,
//          two LayerNorms), final LayerNorm 2 w.
//   LLAMA: token embedding padded_vocab x width, per layer 2 w heads hs + 2 w kv hs
//          (q, o; k, v of kv heads; hs the head size, heads hs = w when head_dim is
//          unset) + 3 w f (gate, up, down) + 2 w (two RMSNorms), final RMSNorm w.
int64_t parameter_count(const Config& c);

// Microbatches each data-parallel replica accumulates per update:
// global_batch_size / (micro_batch_size * data).
int64_t microbatches_per_replica(const Config& c);

// Microbatches each data-parallel replica runs per evaluation:
// training.eval_samples / (micro_batch_size * data); 0 when evaluation is off.
// Validation makes eval_samples a whole number of such microbatches per replica.
int64_t eval_microbatches_per_replica(const Config& c);

// Input tokens per update: global_batch_size * seq_length.
int64_t tokens_per_update(const Config& c);

// parallel.physical_replicas with its default (0: parallel.data) filled in.
int32_t physical_replicas(const Config& c);
// The placement of the data-parallel replicas in words (docs/layout.md), e.g. "4 logical
// replicas on 2 physical ones: physical q computes q, q + 2 in turn" or "one physical
// replica per logical one".
std::string placement_text(const Config& c);

// Full updates in training.train_samples (rounded down).
int64_t full_updates(const Config& c);

// lr_schedule.decay_samples, or training.train_samples when it is 0.
int64_t decay_samples(const Config& c);

}  // namespace troupe::config
