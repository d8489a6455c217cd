#include "ckpt/hf_export.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "config/derived.h"
#include "model/param_registry.h"
#include "model/safetensors.h"

namespace troupe::ckpt {
namespace {

// A float config value as the double with the float's shortest decimal form
// (1e-05, not 9.999999747378752e-06).
double shortest(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

}  // namespace

std::vector<std::pair<std::string, Shape>> gpt2_parameter_shapes(const Config& config) {
  const model::ParameterRegistry registry(config, model::StageRange::whole(config));
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& t : registry.tensors()) out.emplace_back(t.name, t.global_shape);
  return out;
}

std::string hf_gpt2_config_json(const Config& config) {
  const auto& m = config.model();
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["n_layer"] = m.layers();
  j["n_head"] = m.heads();
  j["n_embd"] = m.width();
  j["n_inner"] = config::ffn_width(m);
  j["n_positions"] = m.max_positions();
  j["n_ctx"] = m.max_positions();
  j["vocab_size"] = m.vocab_size();
  j["layer_norm_epsilon"] = shortest(m.layernorm_eps());
  j["activation_function"] = "gelu_new";
  j["tie_word_embeddings"] = true;
  j["initializer_range"] = shortest(m.init_std());
  // The run's dropout: one hidden rate for the embedding and the residual branches.
  j["attn_pdrop"] = shortest(m.attention_dropout());
  j["embd_pdrop"] = shortest(m.hidden_dropout());
  j["resid_pdrop"] = shortest(m.hidden_dropout());
  j["summary_first_dropout"] = 0.0;
  // Both tokenizers put end-of-document last: bytes 256 of 257, GPT-2 50256 of 50257.
  j["bos_token_id"] = m.vocab_size() - 1;
  j["eos_token_id"] = m.vocab_size() - 1;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

HfExportResult export_hf_gpt2(const Checkpoint& checkpoint, const std::string& out_dir,
                              const HfExportOptions& options) {
  const Config config = manifest_config(checkpoint.manifest(), checkpoint.dir());
  const model::ParameterRegistry registry(config, model::StageRange::whole(config));

  std::set<std::string> expected_names;
  for (const auto& t : registry.tensors()) {
    expected_names.insert(t.name);
    if (!checkpoint.has(t.name, TensorPiece::PARAM))
      throw CheckpointError(checkpoint.dir() + ": GPT-2 parameter " + t.name +
                            " (param) is missing from the checkpoint");
    if (checkpoint.shape(t.name, TensorPiece::PARAM) != t.global_shape)
      throw CheckpointError(checkpoint.dir() + ": " + t.name + " (param) has shape " +
                            shape_string(checkpoint.shape(t.name, TensorPiece::PARAM)) +
                            ", the config implies " + shape_string(t.global_shape));
  }
  for (const auto& t : checkpoint.tensors())
    if (t.kind == TensorPiece::PARAM && !expected_names.count(t.name))
      throw CheckpointError(checkpoint.dir() + ": parameter " + t.name +
                            " is not part of GPT-2 for this config; refusing to drop it");

  const std::string prefix = options.transformer_prefix ? "transformer." : "";
  std::vector<model::StTensor> tensors;
  HfExportResult result;
  for (const auto& t : registry.tensors()) {
    // Rows past valid_rows are the vocabulary padding of wte: never predicted, not
    // part of the Hugging Face model.
    Shape out_shape = t.global_shape;
    out_shape[0] = t.valid_rows;
    Region region = Region::whole(t.global_shape);
    region.box[0].extent = t.valid_rows;
    region.flat_end = shape_elements(out_shape);
    const std::vector<float> values = checkpoint.read(t.name, TensorPiece::PARAM, region);
    tensors.push_back(model::StTensor::f32(prefix + t.name, out_shape, values.data()));
    result.parameters += int64_t(values.size());
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw CheckpointError(out_dir + ": cannot create: " + ec.message());
  result.safetensors_path = out_dir + "/model.safetensors";
  result.config_path = out_dir + "/config.json";
  model::write_safetensors(result.safetensors_path, tensors,
                    {{"format", "pt"},
                     {"troupe_step", std::to_string(checkpoint.step())},
                     {"troupe_config_hash", std::to_string(checkpoint.manifest().config_hash())}});
  write_file_atomically(result.config_path, hf_gpt2_config_json(config));
  result.tensors = int(tensors.size());
  return result;
}

}  // namespace troupe::ckpt
