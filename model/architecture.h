// Which layers a config's model is made of, and where each layer's weights live in a
// stage's flat buffers. The one place that reads the model section of the Config for
// the layers: each layer gets only its own small config struct from here.
//
// GPT-2 (the only family now): learned positions, LayerNorm, multi-head attention,
// GELU MLP, head tied to wte. A further family (say Llama: RMSNorm, rotary
// positions, grouped-query attention, SwiGLU of ffn_width, untied head, no biases) is
// a choice of layer kinds here, its tensors in the registry (model/param_registry.h)
// and its weights mapped in block_weights; Block and GptStage stay as they are.
#pragma once

#include "messages/config.pb.h"
#include "model/block.h"
#include "model/layers/embedding.h"
#include "model/layers/head.h"
#include "model/layers/loss.h"
#include "model/param_registry.h"

namespace troupe::model {

struct Architecture {
  layers::EmbeddingConfig embedding;
  BlockConfig block;
  layers::NormConfig final_norm;
  layers::HeadConfig head;
  layers::LossConfig loss;
};

// The layer configs of the model `c` for the tensor-parallel slice `registry` holds.
Architecture architecture(const Config& c, const ParameterRegistry& registry);

// Weights of the stage's tensors (params, grads: its two flat buffers).
layers::EmbeddingWeights embedding_weights(const ParameterRegistry& r, float* params, float* grads);
BlockWeights block_weights(const ParameterRegistry& r, int layer, float* params, float* grads);
layers::NormWeights final_norm_weights(const ParameterRegistry& r, float* params, float* grads);
// The head's weight: wte.weight (tied; the last stage's own copy when it is not the first).
layers::Weight head_weight(const ParameterRegistry& r, float* params, float* grads);

}  // namespace troupe::model
