#include "engine/generate_source.h"

#include <filesystem>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/flat_layout.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "config/hf_config.h"
#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "engine/checkpointing.h"
#include "model/param_registry.h"
#include "model/stage_range.h"

namespace troupe::engine {
namespace {

namespace fs = std::filesystem;
using ckpt::Checkpoint;
using ckpt::CheckpointError;
using ckpt::read_file;

// A tokenizer whose files cannot be read leaves generation by IDs possible: the
// reason is kept for a --prompt that needs it.
void try_tokenizer(GenerateSource& s, const std::string& from, const std::function<std::unique_ptr<data::Tokenizer>()>& make) {
  try {
    s.tokenizer = make();
    s.tokenizer_from = from;
  } catch (const data::DataError& e) {
    s.no_tokenizer = std::string("its tokenizer (") + from + ") cannot be read: " + e.what();
  }
}

// eos_token_id of a config.json or generation_config.json: an ID, a list, or absent.
bool read_eos(const std::string& path, std::vector<int32_t>& out) {
  if (!fs::exists(path)) return false;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw CheckpointError(path + ": invalid JSON at byte " + std::to_string(e.byte));
  }
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return false;
  const auto& e = j["eos_token_id"];
  for (const auto& id : e.is_array() ? e : nlohmann::json::array({e})) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      throw CheckpointError(path + ": eos_token_id " + e.dump() + " is not a token ID or a list of them");
    out.push_back(id.get<int32_t>());
  }
  return true;
}

void open_hf_dir(const std::string& dir, GenerateSource& s) {
  *s.config.mutable_model() = config::model_from_hf_config(read_file(dir + "/config.json"), dir + "/config.json");
  const model::ParameterRegistry reg(s.config, model::StageRange::whole(s.config));
  s.params.resize(size_t(reg.total()));
  ckpt::HfModel::open(dir, s.config).read_into(reg, s.params.data());
  if (s.tokenizer == nullptr && s.no_tokenizer.empty()) {
    if (fs::exists(dir + "/tokenizer.json")) {
      try_tokenizer(s, dir + "/tokenizer.json", [&] { return data::make_hf_tokenizer(dir + "/tokenizer.json"); });
    } else if (fs::exists(dir + "/vocab.json") && fs::exists(dir + "/merges.txt")) {
      try_tokenizer(s, dir + "/vocab.json + merges.txt",
                    [&] { return data::make_gpt2_tokenizer(dir + "/vocab.json", dir + "/merges.txt"); });
    } else if (s.config.model().vocab_size() == 257) {
      s.tokenizer = data::make_byte_tokenizer();
      s.tokenizer_from = "bytes (a model of 257 IDs)";
    } else {
      s.no_tokenizer = dir + " has no tokenizer.json (nor GPT-2's vocab.json + merges.txt)";
    }
  }
  if (!read_eos(dir + "/generation_config.json", s.stop_ids) && !read_eos(dir + "/config.json", s.stop_ids) &&
      s.tokenizer != nullptr)
    s.stop_ids.push_back(s.tokenizer->eod());
}

void open_checkpoint(const std::string& dir, GenerateSource& s, std::vector<std::string>* report) {
  const Checkpoint ck = ckpt::open_checkpoint_path(dir, report);
  s.config = ckpt::manifest_config(ck.manifest(), ck.dir());
  // Older manifests spell an unset norm_eps (meaning layernorm_eps) as 0, which no run
  // can have (ckpt/manifest.h, canonical_config_text).
  if (s.config.model().has_norm_eps() && s.config.model().norm_eps() == 0) s.config.mutable_model()->clear_norm_eps();
  s.config.mutable_parallel()->set_tensor(1);  // one whole model, whatever layout wrote it
  s.config.mutable_parallel()->set_pipeline(1);
  const model::ParameterRegistry reg(s.config, model::StageRange::whole(s.config));
  s.params.assign(size_t(reg.total()), 0.0f);
  ckpt::read_flat_range(ck, reading_layout(ck, reg), TensorPiece::PARAM, 0, reg.total(), s.params.data());
  const DataConfig& d = s.config.data();
  if (s.tokenizer == nullptr && s.no_tokenizer.empty()) {
    switch (d.tokenizer()) {
      case DataConfig::BYTES:
        s.tokenizer = data::make_byte_tokenizer();
        s.tokenizer_from = "bytes (the run's data.tokenizer)";
        break;
      case DataConfig::GPT2:
        try_tokenizer(s, "the run's data.vocab_file " + d.vocab_file() + " and data.merges_file " + d.merges_file(),
                      [&] { return data::make_gpt2_tokenizer(d.vocab_file(), d.merges_file()); });
        break;
      case DataConfig::HF_JSON:
        try_tokenizer(s, "the run's data.tokenizer_file " + d.tokenizer_file(), [&] {
          return data::make_hf_tokenizer(d.tokenizer_file(),
                                         d.eod_id() >= 0 ? std::optional<int32_t>(d.eod_id()) : std::nullopt);
        });
        break;
      default:
        s.no_tokenizer = "the run's dataset was tokenized elsewhere (data.tokenizer NONE)";
    }
  }
  s.stop_ids.push_back(s.tokenizer != nullptr ? s.tokenizer->eod() : int32_t(ckpt::hf_eod_id(s.config)));
}

}  // namespace

GenerateSource open_generate_source(const std::string& dir, const std::string& tokenizer_file,
                                    std::vector<std::string>* report) {
  GenerateSource s;
  if (!tokenizer_file.empty()) {  // named by the user: a file that is not one is an error
    s.tokenizer = data::make_hf_tokenizer(tokenizer_file);
    s.tokenizer_from = tokenizer_file;
  }
  if (fs::exists(dir + "/config.json")) open_hf_dir(dir, s);
  else open_checkpoint(dir, s, report);
  return s;
}

}  // namespace troupe::engine
