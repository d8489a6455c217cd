// Export of a checkpoint's model weights as a Hugging Face GPT-2 model directory
// (model.safetensors + config.json) that transformers' GPT2LMHeadModel loads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ckpt/reader.h"
#include "ckpt/region.h"
#include "messages/config.pb.h"

namespace troupe::ckpt {

// GPT-2's parameters for `config` as checkpoints store them ("param" kind, names
// without the "transformer." prefix, Conv1D weights [in, out], wte padded to
// config::padded_vocab rows), in Hugging Face's order: the whole model's
// model::ParameterRegistry, the one source of these names.
std::vector<std::pair<std::string, Shape>> gpt2_parameter_shapes(const Config& config);

// config.json for `config`: GPT2Config fields (n_layer, n_head, n_embd, vocab_size
// unpadded, n_positions, n_inner, layer_norm_epsilon, activation_function
// "gelu_new", tie_word_embeddings, attn_pdrop, embd_pdrop and resid_pdrop from the model's dropout, ...).
std::string hf_gpt2_config_json(const Config& config);

struct HfExportOptions {
  // Store names as GPT2LMHeadModel's state dict spells them ("transformer.wte.weight")
  // instead of GPT2Model's ("wte.weight", the form of the original GPT-2 files).
  bool transformer_prefix = false;
};

struct HfExportResult {
  std::string safetensors_path;
  std::string config_path;
  int tensors = 0;
  int64_t parameters = 0;  // exported values (wte sliced to vocab_size rows)
};

// Writes OUT_DIR/model.safetensors (model/safetensors.h) and OUT_DIR/config.json
// (each atomically; OUT_DIR is created). The checkpoint must hold exactly the parameters of
// gpt2_parameter_shapes(its config), with those shapes; otherwise CheckpointError
// names the tensor. wte.weight is sliced to the first vocab_size rows.
HfExportResult export_hf_gpt2(const Checkpoint& checkpoint, const std::string& out_dir,
                              const HfExportOptions& options = {});

}  // namespace troupe::ckpt
