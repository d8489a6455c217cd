#include "ckpt/hf_import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/region.h"
#include "config/derived.h"
#include "config/model_family.h"
#include "config/error.h"
#include "config/hf_config.h"
#include "model/stage_range.h"

namespace troupe::ckpt {
namespace {

namespace fs = std::filesystem;

std::string bool_text(bool b) { return b ? "true" : "false"; }

// A tensor that some exports store but that is no parameter: GPT-2's causal-mask
// buffers and Llama's rotary frequencies (both recomputed from the config).
bool known_buffer(const std::string& name, bool llama) {
  if (llama) return name.ends_with(".rotary_emb.inv_freq");
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// The registry name a file's tensor name stands for (GPT-2's "transformer." dropped).
std::string registry_name(const std::string& file_name, bool llama) {
  if (!llama && file_name.starts_with("transformer.")) return file_name.substr(12);
  return file_name;
}

// The weight files of `dir` and, for a sharded model, the index's name -> file map.
std::vector<std::string> weight_files(const std::string& dir, std::map<std::string, std::string>* weight_map) {
  if (fs::exists(fs::path(dir) / "model.safetensors")) return {"model.safetensors"};
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!fs::exists(index_path))
    throw CheckpointError(dir + ": no model.safetensors and no model.safetensors.index.json (troupe reads "
                                "safetensors weights; convert a pytorch_model.bin first)");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(index_path));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(index_path + ": not JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw CheckpointError(index_path + ": weight_map: missing or not an object");
  std::set<std::string> files;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it->is_string()) throw CheckpointError(index_path + ": weight_map." + it.key() + ": expected a file name");
    const std::string file = it->get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw CheckpointError(index_path + ": weight_map." + it.key() + ": \"" + file +
                            "\" is not a file name inside the directory");
    (*weight_map)[it.key()] = file;
    files.insert(file);
  }
  if (files.empty()) throw CheckpointError(index_path + ": weight_map is empty");
  return {files.begin(), files.end()};
}

}  // namespace

std::vector<std::string> hf_config_mismatches(const ModelConfig& hf, const ModelConfig& run) {
  std::vector<std::string> out;
  const bool llama = config::model_family(hf).grouped_query;  // the keys below are Llama's
  const auto check = [&](const char* field, const char* gpt2_key, const char* llama_key, const std::string& hf_value,
                         const std::string& run_value) {
    if (hf_value != run_value)
      out.push_back(fmt::format("model.{}: config.json {} = {}, the run has {}", field, llama ? llama_key : gpt2_key,
                                hf_value, run_value));
  };
  const auto family = [](const ModelConfig& m) { return std::string(config::model_family(m).name); };
  check("architecture", "model_type", "model_type", family(hf), family(run));
  if (!out.empty()) return out;  // the other fields' keys differ by family
  const auto num = [](auto v) { return fmt::format("{}", v); };
  check("layers", "n_layer", "num_hidden_layers", num(hf.layers()), num(run.layers()));
  check("heads", "n_head", "num_attention_heads", num(hf.heads()), num(run.heads()));
  if (llama) check("kv_heads", "", "num_key_value_heads", num(config::kv_heads(hf)), num(config::kv_heads(run)));
  check("width", "n_embd", "hidden_size", num(hf.width()), num(run.width()));
  // The head size where either side sets it (else it follows from width and heads, checked above).
  if (llama && (hf.head_dim() > 0 || run.head_dim() > 0))
    check("head_dim", "", "head_dim", num(config::head_size(hf)), num(config::head_size(run)));
  check("ffn_width", "n_inner", "intermediate_size", num(config::ffn_width(hf)), num(config::ffn_width(run)));
  check("vocab_size", "vocab_size", "vocab_size", num(hf.vocab_size()), num(run.vocab_size()));
  check("max_positions", "n_positions", "max_position_embeddings", num(hf.max_positions()), num(run.max_positions()));
  check("tied_embeddings", "tie_word_embeddings", "tie_word_embeddings", bool_text(hf.tied_embeddings()),
        bool_text(run.tied_embeddings()));
  check(llama ? "norm_eps" : "layernorm_eps", "layer_norm_epsilon", "rms_norm_eps", num(config::norm_eps(hf)),
        num(config::norm_eps(run)));
  if (llama) {
    check("rope_theta", "", "rope_theta", num(hf.rope_theta()), num(run.rope_theta()));
    const auto& a = hf.rope_scaling();
    const auto& b = run.rope_scaling();
    check("rope_scaling.factor", "", "rope_scaling.factor", num(a.factor()), num(b.factor()));
    if (a.factor() != 0 && b.factor() != 0) {
      check("rope_scaling.low_freq_factor", "", "rope_scaling.low_freq_factor", num(a.low_freq_factor()),
            num(b.low_freq_factor()));
      check("rope_scaling.high_freq_factor", "", "rope_scaling.high_freq_factor", num(a.high_freq_factor()),
            num(b.high_freq_factor()));
      check("rope_scaling.original_max_positions", "", "rope_scaling.original_max_position_embeddings",
            num(a.original_max_positions()), num(b.original_max_positions()));
    }
  }
  return out;
}

HfModel HfModel::open(const std::string& dir, const ModelConfig& run) {
  if (!fs::is_directory(dir)) throw CheckpointError(dir + ": not a directory (a Hugging Face model directory)");
  const std::string config_path = dir + "/config.json";
  if (!fs::exists(config_path)) throw CheckpointError(config_path + ": missing (a Hugging Face model directory has one)");
  ModelConfig hf;
  try {
    hf = config::model_from_hf_config(read_file(config_path), config_path);
  } catch (const config::ConfigError& e) {
    throw CheckpointError(e.what());
  }
  if (const auto diff = hf_config_mismatches(hf, run); !diff.empty()) {
    std::string msg = config_path + ": the Hugging Face model does not match the run's model section:";
    for (const auto& line : diff) msg += "\n  " + line;
    throw CheckpointError(msg);
  }
  const bool llama = run.architecture() == ModelConfig::LLAMA;  // Hugging Face's Llama names
  const char* family = llama ? "Llama" : "GPT-2";

  HfModel m;
  m.dir_ = dir;
  std::map<std::string, std::string> weight_map;
  m.file_names_ = weight_files(dir, &weight_map);
  for (const auto& name : m.file_names_) m.files_.push_back(SafetensorsView::open(dir + "/" + name));

  // What the run needs: the whole model's tensors, vocabulary tables unpadded (the
  // registry's shapes only: the seed plays no part).
  const model::ParameterRegistry whole(model::ModelSpec(run, /*seed=*/0, run.vocab_size()),
                                       model::StageRange{0, run.layers()});
  std::map<std::string, Shape> needed;
  for (const auto& t : whole.tensors()) {
    Shape s = t.global_shape;
    s[0] = t.valid_rows;
    needed[t.name] = s;
  }

  const SafetensorsEntry* tied_lm_head = nullptr;
  size_t tied_lm_head_file = 0;
  for (size_t f = 0; f < m.files_.size(); ++f) {
    const auto& view = m.files_[f];
    for (const auto& e : view.entries()) {
      if (!weight_map.empty()) {
        const auto it = weight_map.find(e.name);
        if (it == weight_map.end() || it->second != m.file_names_[f])
          throw CheckpointError(fmt::format("{}: tensor {} is here, but model.safetensors.index.json {}", view.path(),
                                            e.name,
                                            it == weight_map.end() ? "does not list it"
                                                                   : "places it in " + it->second));
      }
      const std::string name = registry_name(e.name, llama);
      if (!needed.count(name)) {
        if (known_buffer(e.name, llama)) continue;
        if (name == "lm_head.weight" && whole.tied()) {
          tied_lm_head = &e;
          tied_lm_head_file = f;
          continue;
        }
        throw CheckpointError(fmt::format("{}: tensor {} is not a parameter of the run's {} (model.tied_embeddings {}); "
                                          "refusing to drop it",
                                          view.path(), e.name, family, bool_text(run.tied_embeddings())));
      }
      if (m.params_.count(name))
        throw CheckpointError(fmt::format("{}: tensor {} is stored twice (also in {}, under another spelling)",
                                          view.path(), e.name, m.files_[m.params_[name].file].path()));
      if (e.shape != needed[name])
        throw CheckpointError(fmt::format("{}: tensor {} has shape {}, the run's model needs {}", view.path(), e.name,
                                          shape_string(e.shape), shape_string(needed[name])));
      if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16")
        throw CheckpointError(fmt::format("{}: tensor {}: dtype {} is not supported (F32, BF16 and F16 are read as fp32)",
                                          view.path(), e.name, e.dtype));
      m.params_[name] = {f, &e};
    }
  }
  for (const auto& t : whole.tensors())
    if (!m.params_.count(t.name))
      throw CheckpointError(fmt::format("{}: the run's {} needs {} {}, which is in none of the weight files ({})", dir,
                                        family, t.name, shape_string(needed[t.name]),
                                        fmt::join(m.file_names_, ", ")));
  for (const auto& [name, file] : weight_map)
    if (!m.files_[size_t(std::find(m.file_names_.begin(), m.file_names_.end(), file) - m.file_names_.begin())].find(name))
      throw CheckpointError(fmt::format("{}/model.safetensors.index.json: {} is listed in {}, which does not hold it",
                                        dir, name, file));
  if (tied_lm_head) {
    // A tied model saved with its head spelled out: accepted only as the same tensor.
    const Source& emb = m.params_.at(whole.embedding_name());
    const bool same = tied_lm_head->dtype == emb.entry->dtype && tied_lm_head->shape == emb.entry->shape &&
                      std::memcmp(m.files_[tied_lm_head_file].bytes(*tied_lm_head), m.files_[emb.file].bytes(*emb.entry),
                                  size_t(emb.entry->end - emb.entry->begin)) == 0;
    if (!same)
      throw CheckpointError(fmt::format("{}: lm_head.weight differs from {}, but the run's head is tied "
                                        "(model.tied_embeddings true)",
                                        m.files_[tied_lm_head_file].path(), emb.entry->name));
  }
  return m;
}

std::vector<std::string> HfModel::files() const { return file_names_; }

const HfModel::Source& HfModel::source(const std::string& name) const {
  const auto it = params_.find(name);
  if (it == params_.end()) throw CheckpointError(dir_ + ": no tensor " + name + " in the Hugging Face model");
  return it->second;
}

void HfModel::read_into(const model::ParameterRegistry& reg, float* host) const {
  for (const auto& t : reg.tensors()) {
    if (t.shape.empty() || t.shape.size() > 2)
      throw CheckpointError(fmt::format("{}: {} has rank {}; only 1-D and 2-D parameters are read", dir_, t.name,
                                        t.shape.size()));
    const Source& src = source(t.name);
    const auto& view = files_[src.file];
    // The box [slice_start, slice_start + shape) of the global tensor, row by row;
    // rows at or past valid_rows are the vocabulary padding (zero).
    const bool matrix = t.shape.size() == 2;
    const int64_t rows = t.shape[0], cols = matrix ? t.shape[1] : 1;
    const int64_t global_cols = matrix ? t.global_shape[1] : 1, col0 = matrix ? t.slice_start[1] : 0;
    float* out = host + t.offset;
    if (!matrix) {
      const int64_t end = std::min(t.slice_start[0] + rows, t.valid_rows);
      const int64_t n = std::max<int64_t>(0, end - t.slice_start[0]);
      if (n > 0) view.read_f32(*src.entry, t.slice_start[0], n, out);
      std::fill(out + n, out + rows, 0.0f);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = t.slice_start[0] + r;
      if (g >= t.valid_rows) {
        std::fill(out + r * cols, out + (r + 1) * cols, 0.0f);
        continue;
      }
      view.read_f32(*src.entry, g * global_cols + col0, cols, out + r * cols);
    }
  }
}

std::vector<float> HfModel::read(const std::string& name) const {
  const Source& src = source(name);
  const int64_t n = shape_elements(src.entry->shape);
  std::vector<float> out(static_cast<size_t>(n));
  files_[src.file].read_f32(*src.entry, 0, n, out.data());
  return out;
}

}  // namespace troupe::ckpt
