// Export of a checkpoint's model weights as a Hugging Face model directory that
// transformers' AutoModelForCausalLM loads: GPT2LMHeadModel or LlamaForCausalLM by
// model.architecture.
//
//   OUT/config.json              the family's config (hf_config_json)
//   OUT/generation_config.json   bos / eos (the run's end-of-document id)
//   OUT/model.safetensors        every parameter, fp32; or, past max_shard_bytes,
//   OUT/model-0000N-of-0000M.safetensors + OUT/model.safetensors.index.json
//
// All or nothing: the files are written (each atomically) into OUT.partial.PID next
// to OUT, which is fsynced and renamed to OUT; OUT must not exist or be an empty
// directory (an export never overwrites or deletes what is there). On any failure the
// staging directory is removed and OUT is untouched.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/reader.h"
#include "ckpt/region.h"
#include "messages/config.pb.h"

namespace troupe::ckpt {

// The parameters of `config` as checkpoints store them ("param" kind, the registry's
// names: GPT-2's without "transformer.", Conv1D weights [in, out]; Llama's with
// "model.", nn.Linear weights [out, in]; vocabulary tables padded to
// config::padded_vocab rows), in Hugging Face's order: the whole model's
// model::ParameterRegistry, the one source of these names.
std::vector<std::pair<std::string, Shape>> hf_parameter_shapes(const Config& config);

// config.json for `config`. GPT-2: GPT2Config fields (n_layer, n_head, n_embd,
// vocab_size unpadded, n_positions, n_inner, layer_norm_epsilon, activation_function
// "gelu_new", tie_word_embeddings, attn_pdrop, embd_pdrop and resid_pdrop from the
// model's dropout, ...). Llama: LlamaConfig fields
// (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, rms_norm_eps, rope_theta, rope_scaling llama3 when
// set, max_position_embeddings, vocab_size unpadded, tie_word_embeddings, hidden_act
// silu, attention_bias and mlp_bias false, attention_dropout from the model's). Both: bos/eos = the run's
// end-of-document id (hf_eod_id), torch_dtype float32.
// `eod`: the id for bos/eos; -1 means hf_eod_id(config).
std::string hf_config_json(const Config& config, int64_t eod = -1);
std::string hf_generation_config_json(const Config& config, int64_t eod = -1);
// The end-of-document id the run's tokenizer appends as far as the config says: 256
// (bytes), data.eod_id (a dataset tokenized elsewhere, or set for a tokenizer.json),
// else the last id (GPT-2's <|endoftext|>; a tokenizer.json's own EOD is in the file:
// the caller passes it as HfExportOptions::eod_id); never past vocab_size - 1.
int64_t hf_eod_id(const Config& config);

struct HfExportOptions {
  // GPT-2 only: store names as GPT2LMHeadModel's state dict spells them
  // ("transformer.wte.weight") instead of GPT2Model's ("wte.weight", the form of the
  // original GPT-2 files).
  bool transformer_prefix = false;
  // Largest safetensors file in bytes of tensor data before the weights are sharded
  // (transformers' default "5GB"). A tensor larger than this gets a file of its own.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  // bos/eos when the caller knows the end-of-document id better than the config (the
  // EOD token of an HF_JSON tokenizer's file); -1: hf_eod_id(config).
  int64_t eod_id = -1;
};

struct HfExportResult {
  std::string out_dir;
  std::vector<std::string> weight_files;  // file names inside out_dir
  std::string config_path;
  int tensors = 0;
  int64_t parameters = 0;  // exported values (vocabulary tables sliced to vocab_size rows)
  // The path of the single weights file (model.safetensors), "" when sharded.
  std::string safetensors_path;
};

// Writes the directory above. The checkpoint must hold exactly the parameters of
// hf_parameter_shapes(its config), with those shapes; otherwise CheckpointError names
// the tensor. Vocabulary tables are sliced to their first vocab_size rows.
HfExportResult export_hf(const Checkpoint& checkpoint, const std::string& out_dir, const HfExportOptions& options = {});

}  // namespace troupe::ckpt
