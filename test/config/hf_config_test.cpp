// Hugging Face config.json -> the model section (config/hf_config.h): published
// models' shapes and their parameter counts, the text round trip, and a refusal per
// key troupe's families cannot express.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <google/protobuf/util/message_differencer.h>

#include "config/derived.h"
#include "config/error.h"
#include "config/hf_config.h"
#include "config/import_config.h"
#include "config/text_format.h"
#include "config/validate.h"

using namespace troupe;
using namespace troupe::config;

namespace {

// TinyLlama-1.1B's config.json (as published, trimmed of keys troupe ignores).
const char* kTinyLlama = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false, "vocab_size": 32000})";

// SmolLM-135M: tied head, 9 heads sharing 3 kv heads.
const char* kSmolLm = R"({"model_type": "llama", "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
  "max_position_embeddings": 2048, "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true, "vocab_size": 49152})";

// Llama 3.1 8B: grouped queries and Llama 3's rotary scaling.
const char* kLlama31 = R"({"model_type": "llama", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false, "vocab_size": 128256,
  "mlp_bias": false, "head_dim": 128, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

// Mistral-Nemo-Base-2407: 32 heads of 128 over a width of 5120 (not 5120 / 32 = 160).
const char* kMistralNemo = R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
  "hidden_size": 5120, "head_dim": 128, "intermediate_size": 14336, "max_position_embeddings": 1024000,
  "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 131072})";

// GPT-2 small.
const char* kGpt2 = R"({"model_type": "gpt2", "activation_function": "gelu_new", "n_embd": 768, "n_head": 12,
  "n_inner": null, "n_layer": 12, "n_positions": 1024, "layer_norm_epsilon": 1e-05, "vocab_size": 50257})";

int64_t count(const ModelConfig& m) {
  Config c;
  *c.mutable_model() = m;
  c.mutable_batch()->set_seq_length(64);
  validate(c, Origins("t"));
  return parameter_count(c);
}

std::string error_of(const std::string& json) {
  try {
    model_from_hf_config(json, "d/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("published configs give the published parameter counts") {
  const ModelConfig tiny = model_from_hf_config(kTinyLlama, "t");
  CHECK(tiny.architecture() == ModelConfig::LLAMA);
  CHECK(tiny.kv_heads() == 4);
  CHECK_FALSE(tiny.tied_embeddings());
  CHECK(count(tiny) == 1'100'048'384);
  const ModelConfig smol = model_from_hf_config(kSmolLm, "t");
  CHECK(smol.tied_embeddings());
  CHECK(count(smol) == 134'515'008);
  const ModelConfig l31 = model_from_hf_config(kLlama31, "t");
  CHECK(l31.rope_scaling().factor() == 8);
  CHECK(l31.rope_scaling().original_max_positions() == 8192);
  CHECK(l31.rope_theta() == 500000);
  CHECK(count(l31) == 8'030'261'248);
  CHECK_FALSE(l31.has_head_dim());  // its head_dim 128 is 4096 / 32: the usual size, left unset
  const ModelConfig nemo = model_from_hf_config(kMistralNemo, "t");
  CHECK(nemo.head_dim() == 128);
  CHECK(head_size(nemo) == 128);
  CHECK(count(nemo) == 12'247'782'400);
  const ModelConfig g = model_from_hf_config(kGpt2, "t");
  CHECK(g.architecture() == ModelConfig::GPT2);
  CHECK(g.ffn_width() == 0);  // n_inner null: 4 x width
  CHECK(count(g) == 124'475'904);  // with the vocabulary padded to 50,304 rows
}

TEST_CASE("the printed section loads back to the same model") {
  for (const char* json : {kTinyLlama, kSmolLm, kLlama31, kMistralNemo, kGpt2}) {
    const ModelConfig m = model_from_hf_config(json, "t");
    const std::string text = model_section_text(m) + "batch { seq_length: 64 }\n";
    const Config c = load_config_text(text, "printed");
    CHECK(google::protobuf::util::MessageDifferencer::Equals(c.model(), m));
  }
}

TEST_CASE("transformers 5's rope_parameters: theta and llama3 scaling read from it, default unscaled") {
  const std::string base = std::string(kTinyLlama).substr(0, std::string(kTinyLlama).size() - 1);
  const auto plain = config::model_from_hf_config(
      base + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})", "d/config.json");
  CHECK(plain.rope_theta() == 500000);
  CHECK(plain.rope_scaling().factor() == 0);
  const auto scaled = config::model_from_hf_config(
      base + R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                 "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
      "d/config.json");
  CHECK(scaled.rope_theta() == 500000);
  CHECK(scaled.rope_scaling().factor() == 8);
  CHECK(scaled.rope_scaling().high_freq_factor() == 4);
  CHECK(scaled.rope_scaling().original_max_positions() == 8192);
}

TEST_CASE("dropout 0.0, as published configs and troupe's exports spell it, reads as no dropout") {
  const std::string base = std::string(kTinyLlama).substr(0, std::string(kTinyLlama).size() - 1);
  CHECK(config::model_from_hf_config(base + R"(, "attention_dropout": 0.0})", "d/config.json").attention_dropout() == 0);
  CHECK(config::model_from_hf_config(base + R"(, "attention_dropout": 0.25})", "d/config.json").attention_dropout() ==
        0.25f);
  CHECK(error_of(base + R"(, "attention_dropout": 1.5})") ==
        "d/config.json: attention_dropout: expected a dropout probability in [0, 1), got 1.5");
  const auto g = config::model_from_hf_config(R"({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8,
      "vocab_size": 10, "n_positions": 8, "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0})", "d/config.json");
  CHECK(g.hidden_dropout() == 0);
  CHECK(g.attention_dropout() == 0);
}

TEST_CASE("what troupe's families cannot express is refused by key") {
  CHECK(error_of(R"({"model_type": "bert"})") ==
        "d/config.json: model_type: \"bert\" is not supported: troupe imports gpt2 and llama (Llama, Mistral without "
        "a sliding window, SmolLM, TinyLlama)");
  CHECK(error_of(R"({"model_type": "llama", "num_hidden_layers": 2})") == "d/config.json: num_attention_heads: missing");
  const std::string base = std::string(kTinyLlama).substr(0, std::string(kTinyLlama).size() - 1);
  CHECK(error_of(base + R"(, "hidden_act": "gelu"})") ==
        "d/config.json: hidden_act: \"gelu\" is not supported: troupe's Llama MLP is SwiGLU (silu)");
  CHECK(error_of(base + R"(, "attention_bias": true})") ==
        "d/config.json: attention_bias: true is not supported: troupe's Llama attention has no biases");
  CHECK(error_of(base + R"(, "sliding_window": 4096})") ==
        "d/config.json: sliding_window: 4096 is not supported: troupe's attention is causal over the whole document");
  CHECK(error_of(base + R"(, "head_dim": 0})") == "d/config.json: head_dim: expected a positive integer, got 0");
  CHECK(error_of(base + R"(, "head_dim": 64.5})") == "d/config.json: head_dim: expected a positive integer, got 64.5");
  CHECK(error_of(base + R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})") ==
        "d/config.json: rope_scaling.rope_type: \"dynamic\" is not supported: troupe scales rotary positions as "
        "Llama 3 does (llama3)");
  CHECK(error_of(base + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})") ==
        "d/config.json: rope_scaling.low_freq_factor: missing");
  CHECK(error_of(base + R"(, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}})") ==
        "d/config.json: rope_parameters.rope_type: \"yarn\" is not supported: troupe scales rotary positions as "
        "Llama 3 does (llama3)");
  CHECK(error_of(base + R"(, "rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})") ==
        "d/config.json: rope_parameters.rope_theta: 500000 differs from the top-level rope_theta 10000");
  CHECK(error_of(base + R"(, "num_hidden_layers": 0})") ==
        "d/config.json: num_hidden_layers: expected a positive integer, got 0");
  CHECK(error_of(R"({"model_type": "gpt2", "activation_function": "relu", "n_layer": 1, "n_head": 1, "n_embd": 8,
                     "vocab_size": 10, "n_positions": 8})") ==
        "d/config.json: activation_function: \"relu\" is not supported: troupe's GPT-2 MLP is the tanh GELU (gelu_new)");
  CHECK(error_of("{not json").rfind("d/config.json: not JSON: ", 0) == 0);
}

TEST_CASE("import-config prints the model section of a vocabulary below the byte tokenizer's, with the tokenizers "
          "that fit it") {
  // A tiny test model (200 IDs): the model section is the same whatever the data
  // section's tokenizer, so it imports; the note says BYTES does not fit and what does.
  const std::string tiny = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "num_hidden_layers": 2,
    "max_position_embeddings": 64, "vocab_size": 200})";
  const std::string text = import_config_text(tiny, "d/config.json", "d/tokenizer.json");
  CHECK(text.find("# from d/config.json: ") == 0);
  CHECK(text.find("#   data { tokenizer: HF_JSON tokenizer_file: \"d/tokenizer.json\" }  (the directory's own)\n") !=
        std::string::npos);
  CHECK(text.find("#   not BYTES, troupe's default: it needs 257 IDs (256 bytes + EOD), the model has 200\n") !=
        std::string::npos);
  CHECK(text.find("tokenizer: BYTES }") == std::string::npos);
  CHECK(text.find("  vocab_size: 200\n") != std::string::npos);
  CHECK(text.find("  head_dim: 24\n") != std::string::npos);
  // Pasted into a config with a tokenizer that fits, it loads and validates as the model.
  const Config c = load_config_text(
      text + "batch { seq_length: 64 }\ndata { tokenizer: NONE prefix: \"x\" eod_id: 0 }\n", "pasted");
  CHECK(c.model().vocab_size() == 200);
  CHECK(c.model().head_dim() == 24);
  CHECK(text.find(fmt::format("{} parameters", parameter_count(c))) != std::string::npos);
  // Without a tokenizer.json beside config.json, any whose IDs fit.
  CHECK(import_config_text(tiny, "d/config.json", "").find("(a tokenizer.json whose IDs are below vocab_size)") !=
        std::string::npos);
  // A vocabulary of 257 or more: BYTES fits too; from 50257 GPT-2's tokenizer as well.
  const std::string smol = import_config_text(kSmolLm, "s/config.json", "");
  CHECK(smol.find("#   data { tokenizer: BYTES }  (troupe's default: IDs 0-256)\n") != std::string::npos);
  CHECK(smol.find("tokenizer: GPT2") == std::string::npos);
  CHECK(import_config_text(kGpt2, "g/config.json", "").find("#   data { tokenizer: GPT2 ") != std::string::npos);
  // The model section is still judged: a shape troupe refuses is refused, named.
  CHECK_THROWS_WITH_AS(import_config_text(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                           "num_attention_heads": 4, "num_key_value_heads": 3, "num_hidden_layers": 2,
                           "max_position_embeddings": 64, "vocab_size": 200})",
                                          "d/config.json", ""),
                       "d/config.json: model.kv_heads: 3 does not divide model.heads = 4", ConfigError);
}
