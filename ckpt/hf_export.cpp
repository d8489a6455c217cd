#include "ckpt/hf_export.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "config/derived.h"
#include "config/model_family.h"
#include "model/param_registry.h"
#include "model/safetensors.h"

namespace troupe::ckpt {
namespace {

namespace fs = std::filesystem;

// A float config value as the double with the float's shortest decimal form
// (1e-05, not 9.999999747378752e-06).
double shortest(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

// The norms' epsilon of a manifest's config. Manifests written before the canonical
// text spelled out the epsilon used (canonical_config_text) hold an unset
// model.norm_eps (which means "layernorm_eps") as 0, a value validation never lets a
// run have: 0 reads as unset.
float norm_eps_of(const ModelConfig& m) {
  return m.has_norm_eps() && m.norm_eps() > 0 ? m.norm_eps() : m.layernorm_eps();
}

void gpt2_fields(const ModelConfig& m, nlohmann::ordered_json& j) {
  const auto& f = config::model_family(ModelConfig::GPT2);
  j["architectures"] = {f.hf_architecture};
  j["model_type"] = f.hf_model_type;
  j["n_layer"] = m.layers();
  j["n_head"] = m.heads();
  j["n_embd"] = m.width();
  j["n_inner"] = config::ffn_width(m);
  j["n_positions"] = m.max_positions();
  j["n_ctx"] = m.max_positions();
  j["vocab_size"] = m.vocab_size();
  j["layer_norm_epsilon"] = shortest(norm_eps_of(m));
  j["activation_function"] = "gelu_new";
  j["tie_word_embeddings"] = m.tied_embeddings();
  j["initializer_range"] = shortest(m.init_std());
  // The run's dropout: one hidden rate for the embedding and the residual branches.
  j["attn_pdrop"] = shortest(m.attention_dropout());
  j["embd_pdrop"] = shortest(m.hidden_dropout());
  j["resid_pdrop"] = shortest(m.hidden_dropout());
  j["summary_first_dropout"] = 0.0;
}

void llama_fields(const ModelConfig& m, nlohmann::ordered_json& j) {
  const auto& f = config::model_family(ModelConfig::LLAMA);
  j["architectures"] = {f.hf_architecture};
  j["model_type"] = f.hf_model_type;
  j["hidden_size"] = m.width();
  j["intermediate_size"] = config::ffn_width(m);
  j["num_hidden_layers"] = m.layers();
  j["num_attention_heads"] = m.heads();
  j["num_key_value_heads"] = config::kv_heads(m);
  j["head_dim"] = config::head_size(m);
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_positions();
  j["vocab_size"] = m.vocab_size();
  j["rms_norm_eps"] = shortest(norm_eps_of(m));
  j["rope_theta"] = m.rope_theta();
  if (m.rope_scaling().factor() != 0) {
    const auto& s = m.rope_scaling();
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor()},
                         {"low_freq_factor", s.low_freq_factor()},
                         {"high_freq_factor", s.high_freq_factor()},
                         {"original_max_position_embeddings", s.original_max_positions()}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = m.tied_embeddings();
  j["initializer_range"] = shortest(m.init_std());
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  // The run's attention dropout (LlamaConfig has no hidden dropout).
  j["attention_dropout"] = shortest(m.attention_dropout());
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
}

// The tensors of one weights file and its name.
struct ShardPlan {
  std::string file;
  std::vector<size_t> tensors;  // indices into the registry's tensors
  uint64_t bytes = 0;
};

std::vector<ShardPlan> plan_shards(const std::vector<uint64_t>& bytes, uint64_t limit) {
  std::vector<ShardPlan> plans;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (plans.empty() || (!plans.back().tensors.empty() && plans.back().bytes + bytes[i] > limit)) plans.emplace_back();
    plans.back().tensors.push_back(i);
    plans.back().bytes += bytes[i];
  }
  if (plans.size() == 1) {
    plans[0].file = "model.safetensors";
  } else {
    for (size_t k = 0; k < plans.size(); ++k) plans[k].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, plans.size());
  }
  return plans;
}

// OUT must be absent or an empty directory: an export never replaces what is there.
void check_out_dir(const std::string& out) {
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (ec || !fs::exists(st)) return;
  if (!fs::is_directory(st)) throw CheckpointError(out + ": exists and is not a directory");
  if (!fs::is_empty(out, ec))
    throw CheckpointError(out + ": exists and is not empty (export writes a new directory; remove it or name another)");
}

}  // namespace

int64_t hf_eod_id(const Config& config) {
  const int64_t vocab = config.model().vocab_size();
  const auto tokenizer = config.data().tokenizer();
  const int64_t eod = tokenizer == DataConfig::BYTES ? 256
                      : tokenizer == DataConfig::NONE || (tokenizer == DataConfig::HF_JSON && config.data().eod_id() >= 0)
                          ? config.data().eod_id()
                          : vocab - 1;
  return eod >= 0 && eod < vocab ? eod : vocab - 1;
}

std::vector<std::pair<std::string, Shape>> hf_parameter_shapes(const Config& config) {
  const model::ParameterRegistry registry(config, model::StageRange::whole(config));
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& t : registry.tensors()) out.emplace_back(t.name, t.global_shape);
  return out;
}

std::string hf_config_json(const Config& config, int64_t eod) {
  if (eod < 0) eod = hf_eod_id(config);
  const auto& m = config.model();
  nlohmann::ordered_json j;
  // Hugging Face's config.json schema of the family.
  if (m.architecture() == ModelConfig::LLAMA)
    llama_fields(m, j);
  else
    gpt2_fields(m, j);
  j["bos_token_id"] = eod;
  j["eos_token_id"] = eod;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(const Config& config, int64_t eod) {
  if (eod < 0) eod = hf_eod_id(config);
  nlohmann::ordered_json j;
  j["_from_model_config"] = true;
  j["bos_token_id"] = eod;
  j["eos_token_id"] = eod;
  return j.dump(2) + "\n";
}

HfExportResult export_hf(const Checkpoint& checkpoint, const std::string& out_dir, const HfExportOptions& options) {
  const Config config = manifest_config(checkpoint.manifest(), checkpoint.dir());
  const model::ParameterRegistry registry(config, model::StageRange::whole(config));
  const bool llama = config.model().architecture() == ModelConfig::LLAMA;  // Hugging Face's Llama names
  const char* family = llama ? "Llama" : "GPT-2";
  if (llama && options.transformer_prefix)
    throw CheckpointError(checkpoint.dir() + ": --transformer-prefix is for GPT-2; Llama names carry \"model.\" already");

  std::set<std::string> expected_names;
  for (const auto& t : registry.tensors()) {
    expected_names.insert(t.name);
    if (!checkpoint.has(t.name, TensorPiece::PARAM))
      throw CheckpointError(fmt::format("{}: {} parameter {} (param) is missing from the checkpoint", checkpoint.dir(),
                                        family, t.name));
    if (checkpoint.shape(t.name, TensorPiece::PARAM) != t.global_shape)
      throw CheckpointError(checkpoint.dir() + ": " + t.name + " (param) has shape " +
                            shape_string(checkpoint.shape(t.name, TensorPiece::PARAM)) +
                            ", the config implies " + shape_string(t.global_shape));
  }
  for (const auto& t : checkpoint.tensors())
    if (t.kind == TensorPiece::PARAM && !expected_names.count(t.name))
      throw CheckpointError(fmt::format("{}: parameter {} is not part of {} for this config; refusing to drop it",
                                        checkpoint.dir(), t.name, family));
  check_out_dir(out_dir);

  // Rows past valid_rows are the vocabulary padding: never predicted, not part of the
  // Hugging Face model.
  const auto exported_shape = [](const model::ParamTensor& t) {
    Shape s = t.global_shape;
    s[0] = t.valid_rows;
    return s;
  };
  std::vector<uint64_t> bytes;
  for (const auto& t : registry.tensors()) bytes.push_back(uint64_t(shape_elements(exported_shape(t))) * 4);
  const auto plans = plan_shards(bytes, options.max_shard_bytes);

  const std::string prefix = options.transformer_prefix ? "transformer." : "";
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"troupe_step", std::to_string(checkpoint.step())},
      {"troupe_config_hash", std::to_string(checkpoint.manifest().config_hash())}};

  const fs::path out_path = fs::absolute(fs::path(out_dir)).lexically_normal();
  const fs::path target = out_path.has_filename() ? out_path : out_path.parent_path();
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw CheckpointError(target.parent_path().string() + ": cannot create: " + ec.message());
  const std::string staging = target.string() + ".partial." + std::to_string(::getpid());
  remove_tree(staging);
  make_dir(staging);

  HfExportResult result;
  try {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    uint64_t total_bytes = 0;
    for (const auto& plan : plans) {
      std::vector<model::StTensor> tensors;
      for (const size_t i : plan.tensors) {
        const auto& t = registry.tensors()[i];
        const Shape shape = exported_shape(t);
        Region region = Region::whole(t.global_shape);
        region.box[0].extent = t.valid_rows;
        region.flat_end = shape_elements(shape);
        const std::vector<float> values = checkpoint.read(t.name, TensorPiece::PARAM, region);
        tensors.push_back(model::StTensor::f32(prefix + t.name, shape, values.data()));
        weight_map[prefix + t.name] = plan.file;
        result.parameters += int64_t(values.size());
        ++result.tensors;
      }
      total_bytes += plan.bytes;
      try {
        model::write_safetensors(staging + "/" + plan.file, tensors, metadata);
      } catch (const std::runtime_error& e) {
        throw CheckpointError(e.what());
      }
      result.weight_files.push_back(plan.file);
    }
    if (plans.size() > 1) {
      nlohmann::ordered_json index;
      index["metadata"] = {{"total_size", total_bytes}};
      index["weight_map"] = weight_map;
      write_file_atomically(staging + "/model.safetensors.index.json", index.dump(2) + "\n");
    }
    write_file_atomically(staging + "/config.json", hf_config_json(config, options.eod_id));
    write_file_atomically(staging + "/generation_config.json", hf_generation_config_json(config, options.eod_id));
    fsync_dir(staging);
    // An empty OUT (checked above) is replaced by the rename; a non-empty one never is.
    if (fs::exists(target, ec)) fs::remove(target, ec);
    rename_path(staging, target.string());
    fsync_dir(target.parent_path().string());
  } catch (...) {
    try {
      remove_tree(staging);
    } catch (const CheckpointError&) {  // the first failure is the one to report
    }
    throw;
  }
  result.out_dir = out_dir;
  result.config_path = out_dir + "/config.json";
  if (plans.size() == 1) result.safetensors_path = out_dir + "/model.safetensors";
  return result;
}

}  // namespace troupe::ckpt
