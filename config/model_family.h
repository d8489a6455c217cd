// The model families (model.architecture), decided here and nowhere else: what each
// family is made of, as properties the rest of the tree reads instead of branching on
// the architecture's name (docs/compute.md, "Model families").
//
//   GPT2:  learned positions, LayerNorm, multi-head attention, GELU MLP, biases.
//   LLAMA: rotary positions inside attention, RMSNorm, grouped-query attention (a head
//          size of its own allowed), SwiGLU MLP of ffn_width, no biases.
//
// A third family is a row of the table in model_family.cpp, with its layer kinds in
// model/architecture.cpp and its tensors in model/param_registry.cpp.
#pragma once

#include "messages/config.pb.h"

namespace troupe::config {

struct ModelFamily {
  ModelConfig::Architecture architecture;
  const char* name;     // "GPT2", "LLAMA": as model.architecture spells it
  const char* summary;  // what it is made of, for the startup block and the plan
  // A position table (GPT-2's wpe); otherwise rotary positions inside attention, with
  // model.rope_theta and model.rope_scaling.
  bool learned_positions;
  bool rms_norm;       // RMSNorm (one weight); otherwise LayerNorm (weight and bias)
  bool swiglu;         // SwiGLU MLP (gate, up, down) of model.ffn_width; otherwise GELU
  bool biases;         // biases on the linear layers
  bool grouped_query;  // model.kv_heads and a head size of its own (model.head_dim)
  // The Hugging Face names: config.json's model_type and architectures[0], and the
  // prefix of its transformer's tensors.
  const char* hf_model_type;
  const char* hf_architecture;
};

const ModelFamily& model_family(ModelConfig::Architecture a);
const ModelFamily& model_family(const ModelConfig& m);

}  // namespace troupe::config
