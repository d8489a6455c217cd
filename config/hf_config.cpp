#include "config/hf_config.h"

#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include "config/error.h"

namespace troupe::config {
namespace {

using Json = nlohmann::json;

// The keys of one JSON object; errors name the file and the key, with `prefix` for a
// nested object ("rope_scaling.").
class Reader {
 public:
  Reader(const Json& j, std::string source, std::string prefix = "")
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {}

  ConfigError error(const std::string& key, const std::string& what) const {
    return ConfigError(fmt::format("{}: {}{}: {}", source_, prefix_, key, what));
  }
  // The reader of the object at `key`.
  Reader nested(const std::string& key) const { return Reader(j_.at(key), source_, prefix_ + key + "."); }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int32_t integer(const std::string& key) const {
    if (!has(key)) throw error(key, "missing");
    const Json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw error(key, fmt::format("expected a positive integer, got {}", v.dump()));
    return int32_t(v.get<int64_t>());
  }
  double number(const std::string& key) const {
    if (!has(key)) throw error(key, "missing");
    const Json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      throw error(key, fmt::format("expected a positive number, got {}", v.dump()));
    return v.get<double>();
  }
  // A dropout probability: a number in [0, 1) (0, no dropout, is the usual value).
  double rate(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_number() || !(v.get<double>() >= 0) || !(v.get<double>() < 1))
      throw error(key, fmt::format("expected a dropout probability in [0, 1), got {}", v.dump()));
    return v.get<double>();
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) throw error(key, fmt::format("expected true or false, got {}", j_.at(key).dump()));
    return j_.at(key).get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) throw error(key, fmt::format("expected a string, got {}", j_.at(key).dump()));
    return j_.at(key).get<std::string>();
  }
  // key must be absent, null, or equal `want`.
  void require(const std::string& key, const Json& want, const std::string& why) const {
    if (has(key) && j_.at(key) != want) throw error(key, fmt::format("{} is not supported: {}", j_.at(key).dump(), why));
  }
  const Json& at(const std::string& key) const { return j_.at(key); }

 private:
  const Json& j_;
  std::string source_, prefix_;
};

ModelConfig gpt2(const Reader& r) {
  ModelConfig m;
  m.set_architecture(ModelConfig::GPT2);
  m.set_layers(r.integer("n_layer"));
  m.set_heads(r.integer("n_head"));
  m.set_width(r.integer("n_embd"));
  if (r.has("n_inner")) m.set_ffn_width(r.integer("n_inner"));
  m.set_vocab_size(r.integer("vocab_size"));
  m.set_max_positions(r.integer("n_positions"));
  if (r.has("layer_norm_epsilon")) m.set_layernorm_eps(float(r.number("layer_norm_epsilon")));
  if (r.has("initializer_range")) m.set_init_std(float(r.number("initializer_range")));
  m.set_tied_embeddings(r.flag("tie_word_embeddings", true));
  r.require("activation_function", "gelu_new", "troupe's GPT-2 MLP is the tanh GELU (gelu_new)");
  // Dropout (GPT2Config's defaults are 0.1): troupe has one hidden rate for the
  // embedding and the residual branches, so embd_pdrop and resid_pdrop must agree.
  const double resid = r.rate("resid_pdrop", 0.1);
  const double embd = r.rate("embd_pdrop", 0.1);
  if (embd != resid)
    throw r.error("embd_pdrop", fmt::format("{:g} differs from resid_pdrop {:g}: troupe applies one hidden dropout "
                                            "(model.hidden_dropout) to the embedding and the residual branches",
                                            embd, resid));
  m.set_hidden_dropout(float(resid));
  m.set_attention_dropout(float(r.rate("attn_pdrop", 0.1)));
  return m;
}

ModelConfig llama(const Reader& r) {
  ModelConfig m;
  m.set_architecture(ModelConfig::LLAMA);
  m.set_layers(r.integer("num_hidden_layers"));
  m.set_heads(r.integer("num_attention_heads"));
  m.set_kv_heads(r.has("num_key_value_heads") ? r.integer("num_key_value_heads") : m.heads());
  m.set_width(r.integer("hidden_size"));
  m.set_ffn_width(r.integer("intermediate_size"));
  m.set_vocab_size(r.integer("vocab_size"));
  m.set_max_positions(r.integer("max_position_embeddings"));
  m.set_norm_eps(float(r.has("rms_norm_eps") ? r.number("rms_norm_eps") : 1e-6));
  m.set_rope_theta(r.has("rope_theta") ? r.number("rope_theta") : 10000.0);
  if (r.has("initializer_range")) m.set_init_std(float(r.number("initializer_range")));
  m.set_tied_embeddings(r.flag("tie_word_embeddings", false));
  // LlamaConfig has attention dropout only (default 0) and no hidden dropout.
  m.set_attention_dropout(float(r.rate("attention_dropout", 0.0)));
  r.require("hidden_act", "silu", "troupe's Llama MLP is SwiGLU (silu)");
  r.require("attention_bias", false, "troupe's Llama attention has no biases");
  r.require("mlp_bias", false, "troupe's Llama MLP has no biases");
  r.require("sliding_window", nullptr, "troupe's attention is causal over the whole document");
  // head_dim: set only where it is not hidden_size / num_attention_heads (Mistral-Nemo's
  // 128 of 5120 / 32), so a config that spells out the usual size imports as before.
  if (r.has("head_dim")) {
    const int32_t head_dim = r.integer("head_dim");
    if (m.width() % m.heads() != 0 || head_dim != m.width() / m.heads()) m.set_head_dim(head_dim);
  }
  // The rotary settings: transformers < 5 writes rope_theta and rope_scaling, 5.x one
  // rope_parameters object holding rope_theta, rope_type ("default": unscaled) and the
  // scaling keys. Both forms in one file must agree on theta.
  const char* scaling_key = r.has("rope_parameters") ? "rope_parameters" : r.has("rope_scaling") ? "rope_scaling" : "";
  if (*scaling_key) {
    const Json& s = r.at(scaling_key);
    if (!s.is_object()) throw r.error(scaling_key, "expected an object, got " + s.dump());
    const Reader sr = r.nested(scaling_key);
    if (std::string(scaling_key) == "rope_parameters" && sr.has("rope_theta")) {
      const double theta = sr.number("rope_theta");
      if (r.has("rope_theta") && r.number("rope_theta") != theta)
        throw sr.error("rope_theta", fmt::format("{} differs from the top-level rope_theta {}", theta, r.number("rope_theta")));
      m.set_rope_theta(theta);
    }
    const std::string type = sr.text("rope_type", sr.text("type", ""));
    const bool unscaled = std::string(scaling_key) == "rope_parameters" && type == "default";
    if (!unscaled) {
      if (type != "llama3")
        throw sr.error("rope_type",
                       fmt::format("\"{}\" is not supported: troupe scales rotary positions as Llama 3 does (llama3)", type));
      auto* rs = m.mutable_rope_scaling();
      rs->set_factor(sr.number("factor"));
      rs->set_low_freq_factor(sr.number("low_freq_factor"));
      rs->set_high_freq_factor(sr.number("high_freq_factor"));
      rs->set_original_max_positions(sr.integer("original_max_position_embeddings"));
    }
  }
  return m;
}

}  // namespace

ModelConfig model_from_hf_config(const std::string& json, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json);
  } catch (const Json::parse_error& e) {
    throw ConfigError(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw ConfigError(source + ": expected a JSON object");
  const Reader r(j, source);
  const std::string type = r.text("model_type", "");
  if (type == "gpt2") return gpt2(r);
  if (type == "llama" || type == "mistral") return llama(r);
  throw r.error("model_type", fmt::format("\"{}\" is not supported: troupe imports gpt2 and llama (Llama, Mistral "
                                          "without a sliding window, SmolLM, TinyLlama)",
                                          type));
}

std::string model_section_text(const ModelConfig& m) {
  std::string body;
  google::protobuf::TextFormat::Printer p;
  p.SetInitialIndentLevel(1);
  p.PrintToString(m, &body);
  return "model {\n" + body + "}\n";
}

}  // namespace troupe::config
