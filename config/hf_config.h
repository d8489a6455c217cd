// Hugging Face model configs (config.json) as troupe's model section: the shapes of a
// published GPT-2 or Llama-family model, so a user writes none by hand
// (`supervisor import-config DIR`; docs/configuration.md, "From a Hugging Face model").
//
//   model_type gpt2:   n_layer, n_head, n_embd, n_inner, vocab_size, n_positions,
//                      layer_norm_epsilon, tie_word_embeddings (default true);
//                      activation_function must be gelu_new (tanh GELU).
//   model_type llama (and mistral with no sliding window): num_hidden_layers,
//                      num_attention_heads, num_key_value_heads, hidden_size,
//                      intermediate_size, vocab_size, max_position_embeddings,
//                      rms_norm_eps, rope_theta, tie_word_embeddings (default false),
//                      rope_scaling of rope_type llama3; hidden_act must be silu,
//                      attention_bias and mlp_bias false; head_dim (model.head_dim
//                      where it is not hidden_size / num_attention_heads).
// Anything troupe's family cannot express is refused, naming the key and its value;
// nothing is reinterpreted silently.
#pragma once

#include <string>

#include "messages/config.pb.h"

namespace troupe::config {

// The model section for the config.json text `json` (`source` names it in errors:
// "DIR/config.json: KEY: WHAT"). Throws ConfigError.
ModelConfig model_from_hf_config(const std::string& json, const std::string& source);

// "model {\n  ...\n}\n" in protobuf text format.
std::string model_section_text(const ModelConfig& m);

}  // namespace troupe::config
