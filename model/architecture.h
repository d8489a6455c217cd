// Which layers a config's model is made of, and where each layer's weights live in a
// stage's flat buffers. The one place that reads the model section of the Config for
// the layers: each layer gets only its own small config struct from here.
//
// The families (model.architecture):
//   GPT2:  learned positions, LayerNorm, multi-head attention, GELU MLP, biases, head
//          tied to wte (or lm_head.weight).
//   LLAMA: no position table (rotary positions inside attention), RMSNorm,
//          grouped-query attention, SwiGLU MLP of ffn_width, no biases, head untied
//          (lm_head.weight) or tied to embed_tokens.
// A third family is a choice of layer kinds here (a new kind in model/layers when it
// needs one), its tensors in the registry (model/param_registry.h) and its weights
// mapped in block_weights; Block and GptStage stay as they are (docs/compute.md,
// "Model families").
#pragma once

#include <optional>

#include "messages/config.pb.h"
#include "model/block.h"
#include "model/layers/embedding.h"
#include "model/layers/head.h"
#include "model/layers/loss.h"
#include "model/layers/rope.h"
#include "model/model_spec.h"
#include "model/param_registry.h"

namespace troupe::model {

struct Architecture {
  // Rotary tables the stage builds (LLAMA) and hands to block.attention.rope; nullopt: none.
  std::optional<layers::RopeConfig> rope;
  layers::EmbeddingConfig embedding;
  // Every block's layers; their dropout keys are per layer (block_config).
  BlockConfig block;
  layers::NormConfig final_norm;
  layers::HeadConfig head;
  layers::LossConfig loss;
  // The run's seed (training.seed), which keys the dropout masks.
  uint64_t seed = 0;
};

// The layer configs of the model `spec` for the tensor-parallel slice `registry` holds.
Architecture architecture(const ModelSpec& spec, const ParameterRegistry& registry);

// Block `layer`'s config (global index): a.block with the dropout keys of that layer
// (kernels::dropout_key of the run's seed, the layer and the site).
BlockConfig block_config(const Architecture& a, int layer);

// Weights of the stage's tensors (params, grads: its two flat buffers).
layers::EmbeddingWeights embedding_weights(const ParameterRegistry& r, float* params, float* grads);
BlockWeights block_weights(const ParameterRegistry& r, int layer, float* params, float* grads);
layers::NormWeights final_norm_weights(const ParameterRegistry& r, float* params, float* grads);
// The head's weight: the token embedding (tied; the last stage's own copy when it is
// not the first) or lm_head.weight.
layers::Weight head_weight(const ParameterRegistry& r, float* params, float* grads);

}  // namespace troupe::model
