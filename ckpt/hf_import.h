// A Hugging Face model directory as a run's initial weights (training.init_from):
// config.json, and model.safetensors or the shards that model.safetensors.index.json
// names (model-0000N-of-0000M.safetensors), for GPT-2 and Llama-family models.
//
// What open() checks, each failure one CheckpointError naming the file:
//   - config.json reads as troupe's model section (config/hf_config.h) and equals the
//     run's model field by field (layers, heads, kv heads, width, FFN width, vocab
//     size, positions, tied head, norm epsilon, rope theta and scaling): every
//     mismatch is a line naming the field, config.json's key and value, and the run's
//     value; nothing is reinterpreted;
//   - every parameter of the run's whole model is in exactly one weight file under
//     its Hugging Face name, with the unpadded global shape (vocabulary tables:
//     vocab_size rows) and dtype F32, BF16 or F16 (converted to fp32 when read);
//   - no weight file holds anything else, except the non-parameter buffers older
//     exports carry (GPT-2's h.N.attn.bias / masked_bias causal masks, Llama's
//     rotary_emb.inv_freq), and, for a tied head, an lm_head.weight bitwise equal to
//     the embedding;
//   - a sharded index maps each name to the file that holds it.
// Names: GPT-2 files with or without the "transformer." prefix (the run's registry
// names carry none); an untied GPT-2 head and every Llama head is lm_head.weight;
// Llama names carry "model.". When both model.safetensors and the index exist,
// model.safetensors is read (as transformers does).
//
// The files are mapped, not loaded: read_into copies out only the box of each global
// tensor a registry (a pipeline stage's tensor-parallel slice) holds.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors_view.h"
#include "messages/config.pb.h"
#include "model/param_registry.h"

namespace troupe::ckpt {

// Where config.json's model and the run's differ, one line each:
// "model.layers: config.json num_hidden_layers = 2, the run has 4". Empty when equal.
std::vector<std::string> hf_config_mismatches(const ModelConfig& hf, const ModelConfig& run);

class HfModel {
 public:
  // `run`: the run's model section, which config.json must match.
  static HfModel open(const std::string& dir, const ModelConfig& run);
  static HfModel open(const std::string& dir, const Config& run) { return open(dir, run.model()); }

  const std::string& dir() const { return dir_; }
  // The weight files read ("model.safetensors" or the index's shards), in name order.
  std::vector<std::string> files() const;

  // Every tensor of `reg` (a registry of the run's config) into host memory laid out
  // as reg (reg.total() floats): its box of the global tensor, vocabulary padding rows
  // zero.
  void read_into(const model::ParameterRegistry& reg, float* host) const;
  // One whole tensor by registry name, as the file holds it (unpadded), in fp32.
  std::vector<float> read(const std::string& name) const;

 private:
  struct Source {
    size_t file = 0;
    const SafetensorsEntry* entry = nullptr;
  };
  const Source& source(const std::string& name) const;

  std::string dir_;
  std::deque<SafetensorsView> files_;   // deque: entries keep their addresses
  std::vector<std::string> file_names_;
  std::map<std::string, Source> params_;  // registry name -> where it is stored
};

}  // namespace troupe::ckpt
