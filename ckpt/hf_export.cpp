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
#include "ckpt/safetensors.h"
#include "config/derived.h"

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
  const auto& m = config.model();
  const int64_t w = m.width(), f = config::ffn_width(m);
  std::vector<std::pair<std::string, Shape>> out = {
      {"wte.weight", {config::padded_vocab(config), w}},
      {"wpe.weight", {m.max_positions(), w}},
  };
  for (int i = 0; i < m.layers(); ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    out.push_back({h + "ln_1.weight", {w}});
    out.push_back({h + "ln_1.bias", {w}});
    out.push_back({h + "attn.c_attn.weight", {w, 3 * w}});
    out.push_back({h + "attn.c_attn.bias", {3 * w}});
    out.push_back({h + "attn.c_proj.weight", {w, w}});
    out.push_back({h + "attn.c_proj.bias", {w}});
    out.push_back({h + "ln_2.weight", {w}});
    out.push_back({h + "ln_2.bias", {w}});
    out.push_back({h + "mlp.c_fc.weight", {w, f}});
    out.push_back({h + "mlp.c_fc.bias", {f}});
    out.push_back({h + "mlp.c_proj.weight", {f, w}});
    out.push_back({h + "mlp.c_proj.bias", {w}});
  }
  out.push_back({"ln_f.weight", {w}});
  out.push_back({"ln_f.bias", {w}});
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
  // troupe trains without dropout.
  j["attn_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["resid_pdrop"] = 0.0;
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
  const auto expected = gpt2_parameter_shapes(config);

  std::set<std::string> expected_names;
  for (const auto& [name, shape] : expected) {
    expected_names.insert(name);
    if (!checkpoint.has(name, TensorPiece::PARAM))
      throw CheckpointError(checkpoint.dir() + ": GPT-2 parameter " + name +
                            " (param) is missing from the checkpoint");
    if (checkpoint.shape(name, TensorPiece::PARAM) != shape)
      throw CheckpointError(checkpoint.dir() + ": " + name + " (param) has shape " +
                            shape_string(checkpoint.shape(name, TensorPiece::PARAM)) +
                            ", the config implies " + shape_string(shape));
  }
  for (const auto& t : checkpoint.tensors())
    if (t.kind == TensorPiece::PARAM && !expected_names.count(t.name))
      throw CheckpointError(checkpoint.dir() + ": parameter " + t.name +
                            " is not part of GPT-2 for this config; refusing to drop it");

  const std::string prefix = options.transformer_prefix ? "transformer." : "";
  std::vector<std::vector<float>> values;
  std::vector<TensorView> views;
  values.reserve(expected.size());
  HfExportResult result;
  for (const auto& [name, shape] : expected) {
    Shape out_shape = shape;
    Region region = Region::whole(shape);
    if (name == "wte.weight") {
      // Rows past vocab_size are padding: never predicted, not part of the HF model.
      out_shape[0] = config.model().vocab_size();
      region.box[0].extent = out_shape[0];
      region.flat_end = shape_elements(out_shape);
    }
    values.push_back(checkpoint.read(name, TensorPiece::PARAM, region));
    views.push_back({prefix + name, out_shape, values.back()});
    result.parameters += int64_t(values.back().size());
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw CheckpointError(out_dir + ": cannot create: " + ec.message());
  result.safetensors_path = out_dir + "/model.safetensors";
  result.config_path = out_dir + "/config.json";
  write_safetensors(result.safetensors_path, views,
                    {{"format", "pt"},
                     {"troupe_step", std::to_string(checkpoint.step())},
                     {"troupe_config_hash", std::to_string(checkpoint.manifest().config_hash())}});
  write_file_atomically(result.config_path, hf_gpt2_config_json(config));
  result.tensors = int(views.size());
  return result;
}

}  // namespace troupe::ckpt
