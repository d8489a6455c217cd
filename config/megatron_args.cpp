#include "config/megatron_args.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/error.h"
#include "config/text_format.h"

namespace troupe::config {
namespace {

struct Token {
  std::string text;
  int line;  // 1-based
};

// Splits the fragment into words with their line numbers. Quotes ('...' or "...")
// group a word with spaces; '#' at the start of a word comments out the rest of
// the line; a lone '\' (a shell line continuation) is dropped.
std::vector<Token> tokenize(std::string_view text, const std::string& source) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    const char ch = text[i];
    if (ch == '\n') {
      ++line;
      ++i;
    } else if (ch == ' ' || ch == '\t' || ch == '\r') {
      ++i;
    } else if (ch == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      std::string word;
      while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\r' &&
             text[i] != '\n') {
        if (text[i] == '"' || text[i] == '\'') {
          const char q = text[i++];
          const size_t end = text.find(q, i);
          if (end == std::string_view::npos || text.substr(i, end - i).find('\n') != std::string_view::npos)
            throw ConfigError(fmt::format("{}:{}: unterminated quote", source, line));
          word += text.substr(i, end - i);
          i = end + 1;
        } else {
          word += text[i++];
        }
      }
      if (word != "\\") out.push_back({word, line});
    }
  }
  return out;
}

// One flag occurrence: "--name" with its value (if it takes one).
struct Occurrence {
  std::string name;
  std::optional<std::string> value;
  int line;
  std::vector<std::string> words;  // every value word of a blend flag (--data-path W1 P1 W2 P2)
};

// Flags whose value is a list of words: Megatron's blends.
bool takes_words(const std::string& name) {
  return name == "data-path" || name == "train-data-path" || name == "valid-data-path" || name == "test-data-path";
}

struct Context {
  Config& cfg;
  Origins& origins;
  const std::string& source;
  const Occurrence& occ;

  std::string where() const { return fmt::format("{}:{} (--{})", source, occ.line, occ.name); }
  ConfigError error(const std::string& what) const {
    return ConfigError(fmt::format("{}:{}: --{}: {}", source, occ.line, occ.name, what));
  }
  void mark(const std::string& field) const { origins.set(field, where()); }

  int64_t integer(int64_t lo, int64_t hi) const {
    const std::string& v = *occ.value;
    int64_t x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || end != v.data() + v.size())
      throw error(fmt::format("expected an integer, got \"{}\"", v));
    if (x < lo || x > hi) throw error(fmt::format("{} is outside [{}, {}]", x, lo, hi));
    return x;
  }
  int32_t int32() const {
    return int32_t(integer(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
  }
  double number() const {
    const std::string& v = *occ.value;
    double x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x))
      throw error(fmt::format("expected a number, got \"{}\"", v));
    return x;
  }
  // The value must be one of `allowed` (Megatron's spelling); returns its index.
  size_t choice(std::initializer_list<const char*> allowed, const std::string& why) const {
    size_t k = 0;
    for (const char* a : allowed) {
      if (*occ.value == a) return k;
      ++k;
    }
    throw error(fmt::format("\"{}\" is not supported: {}", *occ.value, why));
  }
};

struct Flag {
  bool takes_value;
  std::function<void(const Context&)> apply;
};


Flag int32_flag(const char* field, void (*set)(Config&, int32_t)) {
  return {true, [=](const Context& c) { set(c.cfg, c.int32()); c.mark(field); }};
}
Flag int64_flag(const char* field, void (*set)(Config&, int64_t)) {
  return {true, [=](const Context& c) {
            set(c.cfg, c.integer(0, std::numeric_limits<int64_t>::max()));
            c.mark(field);
          }};
}
Flag number_flag(const char* field, void (*set)(Config&, double)) {
  return {true, [=](const Context& c) { set(c.cfg, c.number()); c.mark(field); }};
}
Flag string_flag(const char* field, void (*set)(Config&, const std::string&)) {
  return {true, [=](const Context& c) { set(c.cfg, *c.occ.value); c.mark(field); }};
}
// Megatron's blend lists (megatron.core.datasets.utils.get_blend_from_list): one prefix,
// or weight-prefix pairs "W1 P1 W2 P2 ...". Which blend they fill: --data-path the
// train blend over each dataset's --split; the per-split paths their own split's, each
// dataset read whole (Megatron's blend_per_split).
enum class BlendTarget { Split, Train, Valid, Test };

void set_blend(Config& cfg, BlendTarget target, const std::vector<std::string>& words,
               const std::function<ConfigError(const std::string&)>& error) {
  auto& d = *cfg.mutable_data();
  auto* blend = target == BlendTarget::Valid  ? d.mutable_valid_blend()
                : target == BlendTarget::Test ? d.mutable_test_blend()
                                              : d.mutable_blend();
  blend->Clear();
  if (target == BlendTarget::Split || target == BlendTarget::Train) d.clear_prefix();
  if (words.empty()) throw error("names no dataset");
  if (words.size() == 1 && target == BlendTarget::Split) {
    d.set_prefix(words[0]);
    return;
  }
  std::vector<std::optional<double>> weights;
  if (words.size() % 2 == 0) {
    for (size_t i = 0; i < words.size(); i += 2) {
      const std::string& w = words[i];
      double x = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), x);
      weights.push_back(ec == std::errc() && end == w.data() + w.size() ? std::optional<double>(x) : std::nullopt);
    }
  }
  const size_t numbers = size_t(std::count_if(weights.begin(), weights.end(), [](auto& w) { return w.has_value(); }));
  if (numbers == 0 && words.size() > 1)
    throw error(fmt::format("{} prefixes without weights: Megatron then weights each dataset by its size, which "
                            "troupe does not build; give weights, W1 PREFIX1 W2 PREFIX2 ...",
                            words.size()));
  if (numbers != 0 && numbers != weights.size())
    throw error("mixes weights and prefixes in the weights' places: write W1 PREFIX1 W2 PREFIX2 ...");
  for (size_t i = 0; i < (numbers ? weights.size() : 1); ++i) {
    auto* e = blend->Add();
    e->set_weight(numbers ? *weights[i] : 1.0);
    e->set_prefix(numbers ? words[2 * i + 1] : words[0]);
    if (target == BlendTarget::Train) e->set_split("1");  // read whole for training
  }
}

Flag blend_flag(BlendTarget target) {
  return {true, [=](const Context& c) {
            set_blend(c.cfg, target, c.occ.words, [&](const std::string& what) { return c.error(what); });
            c.mark(target == BlendTarget::Valid  ? "data.valid_blend"
                   : target == BlendTarget::Test ? "data.test_blend"
                                                 : "data.blend");
          }};
}

// A file's whitespace-separated words.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < text.size() && std::isspace((unsigned char)text[i])) ++i;
    if (i >= text.size()) break;
    const size_t b = i;
    while (i < text.size() && !std::isspace((unsigned char)text[i])) ++i;
    out.push_back(text.substr(b, i - b));
  }
  return out;
}

// A switch for behaviour troupe always has: accepted, changes nothing.
Flag always() {
  return {false, [](const Context&) {}};
}

const std::map<std::string, Flag>& flags() {
  static const std::map<std::string, Flag> table = {
      // Parallel layout.
      {"tensor-model-parallel-size",
       int32_flag("parallel.tensor", [](Config& c, int32_t v) { c.mutable_parallel()->set_tensor(v); })},
      // Megatron's virtual pipeline: the interleaved schedule with v chunks a stage
      // (settle_virtual_pipeline; --num-layers-per-virtual-pipeline-stage N gives
      // v = layers / (pipeline x N) once both are known).
      {"virtual-pipeline-model-parallel-size", {true, [](const Context& c) {
         const int32_t v = int32_t(c.integer(1, 1 << 20));
         c.cfg.mutable_parallel()->set_virtual_stages(v);
         c.cfg.mutable_parallel()->set_schedule(v > 1 ? ParallelConfig::INTERLEAVED_1F1B : ParallelConfig::ONE_F_ONE_B);
         c.mark("parallel.virtual_stages");
         c.mark("parallel.schedule");
       }}},
      {"num-layers-per-virtual-pipeline-stage", {true, [](const Context& c) { c.integer(1, 1 << 20); }}},
      {"pipeline-model-parallel-size",
       int32_flag("parallel.pipeline", [](Config& c, int32_t v) { c.mutable_parallel()->set_pipeline(v); })},
      {"context-parallel-size",
       int32_flag("parallel.context", [](Config& c, int32_t v) { c.mutable_parallel()->set_context(v); })},
      {"data-parallel-size",  // troupe's addition: Megatron derives DP from the world size
       int32_flag("parallel.data", [](Config& c, int32_t v) { c.mutable_parallel()->set_data(v); })},
      {"sequence-parallel", {false, [](const Context& c) {
         c.cfg.mutable_parallel()->set_sequence_parallel(true);
         c.mark("parallel.sequence_parallel");
       }}},
      {"use-distributed-optimizer", {false, [](const Context& c) {
         c.cfg.mutable_parallel()->set_distributed_optimizer(true);
         c.mark("parallel.distributed_optimizer");
       }}},
      {"overlap-grad-reduce", always()},
      {"overlap-param-gather", always()},
      // Batch.
      {"micro-batch-size",
       int32_flag("batch.micro_batch_size", [](Config& c, int32_t v) { c.mutable_batch()->set_micro_batch_size(v); })},
      {"global-batch-size",
       int32_flag("batch.global_batch_size", [](Config& c, int32_t v) { c.mutable_batch()->set_global_batch_size(v); })},
      {"seq-length",
       int32_flag("batch.seq_length", [](Config& c, int32_t v) { c.mutable_batch()->set_seq_length(v); })},
      // Precision: bf16 on GPU (fp32 on CPU) is what troupe always does.
      {"bf16", always()},
      // Optimizer: AdamW (Megatron's "adam" with decoupled weight decay).
      {"optimizer", {true, [](const Context& c) {
         c.choice({"adam"}, "troupe implements AdamW only (--optimizer adam)");
       }}},
      {"adam-beta1", number_flag("optimizer.beta1", [](Config& c, double v) { c.mutable_optimizer()->set_beta1(v); })},
      {"adam-beta2", number_flag("optimizer.beta2", [](Config& c, double v) { c.mutable_optimizer()->set_beta2(v); })},
      {"adam-eps", number_flag("optimizer.eps", [](Config& c, double v) { c.mutable_optimizer()->set_eps(v); })},
      {"weight-decay",
       number_flag("optimizer.weight_decay", [](Config& c, double v) { c.mutable_optimizer()->set_weight_decay(v); })},
      {"weight-decay-incr-style", {true, [](const Context& c) {
         c.choice({"constant"}, "troupe keeps weight decay constant (--weight-decay-incr-style constant)");
       }}},
      {"clip-grad", number_flag("optimizer.clip_grad", [](Config& c, double v) { c.mutable_optimizer()->set_clip_grad(v); })},
      {"lr", number_flag("optimizer.lr", [](Config& c, double v) { c.mutable_optimizer()->set_lr(v); })},
      {"min-lr", number_flag("optimizer.min_lr", [](Config& c, double v) { c.mutable_optimizer()->set_min_lr(v); })},
      {"lr-warmup-init",
       number_flag("optimizer.warmup_init", [](Config& c, double v) { c.mutable_optimizer()->set_warmup_init(v); })},
      // LR schedule and length of training, in samples.
      {"lr-decay-style", {true, [](const Context& c) {
         static const LrScheduleConfig::DecayStyle styles[] = {
             LrScheduleConfig::COSINE, LrScheduleConfig::LINEAR, LrScheduleConfig::CONSTANT};
         const size_t k = c.choice({"cosine", "linear", "constant"},
                                   "troupe decays cosine, linear or constant");
         c.cfg.mutable_lr_schedule()->set_decay_style(styles[k]);
         c.mark("lr_schedule.decay_style");
       }}},
      {"lr-warmup-samples", int64_flag("lr_schedule.warmup_samples",
                                       [](Config& c, int64_t v) { c.mutable_lr_schedule()->set_warmup_samples(v); })},
      {"lr-decay-samples", int64_flag("lr_schedule.decay_samples",
                                      [](Config& c, int64_t v) { c.mutable_lr_schedule()->set_decay_samples(v); })},
      {"train-samples",
       int64_flag("training.train_samples", [](Config& c, int64_t v) { c.mutable_training()->set_train_samples(v); })},
      {"seed", int64_flag("training.seed", [](Config& c, int64_t v) {
         c.mutable_training()->set_seed(uint64_t(v));
       })},
      // Model.
      {"num-layers", int32_flag("model.layers", [](Config& c, int32_t v) { c.mutable_model()->set_layers(v); })},
      {"hidden-size", int32_flag("model.width", [](Config& c, int32_t v) { c.mutable_model()->set_width(v); })},
      {"num-attention-heads", int32_flag("model.heads", [](Config& c, int32_t v) { c.mutable_model()->set_heads(v); })},
      {"ffn-hidden-size", int32_flag("model.ffn_width", [](Config& c, int32_t v) { c.mutable_model()->set_ffn_width(v); })},
      {"vocab-size", int32_flag("model.vocab_size", [](Config& c, int32_t v) { c.mutable_model()->set_vocab_size(v); })},
      {"make-vocab-size-divisible-by", int32_flag("model.vocab_pad_multiple", [](Config& c, int32_t v) {
         c.mutable_model()->set_vocab_pad_multiple(v);
       })},
      {"max-position-embeddings", int32_flag("model.max_positions", [](Config& c, int32_t v) {
         c.mutable_model()->set_max_positions(v);
       })},
      {"init-method-std", number_flag("model.init_std", [](Config& c, double v) {
         c.mutable_model()->set_init_std(float(v));
       })},
      {"layernorm-epsilon", number_flag("model.layernorm_eps", [](Config& c, double v) {
         c.mutable_model()->set_layernorm_eps(float(v));
       })},
      {"untie-embeddings-and-output-weights", {false, [](const Context& c) {
         c.cfg.mutable_model()->set_tied_embeddings(false);
         c.mark("model.tied_embeddings");
       }}},
      // The Llama family's features; settle_family checks they come together.
      {"position-embedding-type", {true, [](const Context& c) {
         c.choice({"learned_absolute", "rope"}, "troupe has learned absolute (GPT2) or rotary (LLAMA) positions");
       }}},
      {"use-rotary-position-embeddings", {false, [](const Context&) {}}},
      {"normalization", {true, [](const Context& c) {
         c.choice({"LayerNorm", "RMSNorm"}, "troupe normalizes with LayerNorm (GPT2) or RMSNorm (LLAMA)");
       }}},
      {"swiglu", {false, [](const Context&) {}}},
      {"disable-bias-linear", {false, [](const Context&) {}}},
      {"group-query-attention", {false, [](const Context&) {}}},
      {"num-query-groups", int32_flag("model.kv_heads", [](Config& c, int32_t v) { c.mutable_model()->set_kv_heads(v); })},
      // The size of a head (Megatron's default: hidden size / heads); LLAMA only (validation).
      {"kv-channels", int32_flag("model.head_dim", [](Config& c, int32_t v) { c.mutable_model()->set_head_dim(v); })},
      {"rotary-base", number_flag("model.rope_theta", [](Config& c, double v) { c.mutable_model()->set_rope_theta(v); })},
      {"norm-epsilon", number_flag("model.norm_eps", [](Config& c, double v) {
         c.mutable_model()->set_norm_eps(float(v));
       })},
      // Activation recomputation (docs/compute.md, "Recomputation").
      {"recompute-activations", {false, [](const Context& c) {  // Megatron's shorthand for selective
         c.cfg.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
         c.mark("model.recompute");
       }}},
      {"recompute-granularity", {true, [](const Context& c) {
         const size_t k = c.choice({"selective", "full"}, "Megatron-LM recomputes selective or full");
         c.cfg.mutable_model()->set_recompute(k == 0 ? ModelConfig::SELECTIVE : ModelConfig::FULL);
         c.mark("model.recompute");
       }}},
      {"recompute-method", {true, [](const Context& c) {
         const size_t k = c.choice({"uniform", "block"}, "Megatron-LM recomputes by the uniform or the block method");
         c.cfg.mutable_model()->set_recompute_method(k == 0 ? ModelConfig::UNIFORM : ModelConfig::BLOCK);
         c.mark("model.recompute_method");
       }}},
      {"recompute-num-layers", int32_flag("model.recompute_num_layers", [](Config& c, int32_t v) {
         c.mutable_model()->set_recompute_num_layers(v);
       })},
      {"attention-dropout", number_flag("model.attention_dropout", [](Config& c, double v) {
         c.mutable_model()->set_attention_dropout(float(v));
       })},
      {"hidden-dropout", number_flag("model.hidden_dropout", [](Config& c, double v) {
         c.mutable_model()->set_hidden_dropout(float(v));
       })},
      // Data, checkpoints, logging.
      {"data-path", blend_flag(BlendTarget::Split)},
      {"train-data-path", blend_flag(BlendTarget::Train)},
      {"valid-data-path", blend_flag(BlendTarget::Valid)},
      {"test-data-path", blend_flag(BlendTarget::Test)},
      // A file holding --data-path's words.
      {"data-args-path", {true, [](const Context& c) {
         const std::string path = *c.occ.value;
         set_blend(c.cfg, BlendTarget::Split, words_of(read_config_file(path)),
                   [&](const std::string& what) { return c.error(path + ": " + what); });
         c.mark("data.blend");
       }}},
      // A JSON file {"train": [...], "valid": [...], "test": [...]} of per-split blends,
      // each a list of words or one string of them.
      {"per-split-data-args-path", {true, [](const Context& c) {
         const std::string path = *c.occ.value;
         nlohmann::json j;
         try {
           j = nlohmann::json::parse(read_config_file(path));
         } catch (const nlohmann::json::exception& e) {
           throw c.error(path + ": not JSON: " + e.what());
         }
         if (!j.is_object()) throw c.error(path + ": expected an object with \"train\", \"valid\", \"test\"");
         const std::pair<const char*, BlendTarget> splits[] = {
             {"train", BlendTarget::Train}, {"valid", BlendTarget::Valid}, {"test", BlendTarget::Test}};
         for (const auto& [key, target] : splits) {
           if (!j.contains(key) || j[key].is_null()) continue;
           std::vector<std::string> words;
           if (j[key].is_string()) {
             words = words_of(j[key].get<std::string>());
           } else if (j[key].is_array()) {
             for (const auto& w : j[key]) {
               if (!w.is_string() && !w.is_number())
                 throw c.error(fmt::format("{}: \"{}\": {} is neither a weight nor a prefix", path, key, w.dump()));
               words.push_back(w.is_string() ? w.get<std::string>() : w.dump());
             }
           } else {
             throw c.error(fmt::format("{}: \"{}\" is not a list of words", path, key));
           }
           set_blend(c.cfg, target, words,
                     [&](const std::string& what) { return c.error(fmt::format("{}: \"{}\": {}", path, key, what)); });
         }
         c.mark("data.blend");
       }}},
      {"split", string_flag("data.split", [](Config& c, const std::string& v) { c.mutable_data()->set_split(v); })},
      {"tokenizer-type", {true, [](const Context& c) {
         const size_t k = c.choice({"GPT2BPETokenizer", "HuggingFaceTokenizer"},
                                   "troupe reads GPT2BPETokenizer vocabularies and HuggingFaceTokenizer "
                                   "tokenizer.json files of byte-level BPE models (or bytes, from a textproto)");
         c.cfg.mutable_data()->set_tokenizer(k == 0 ? DataConfig::GPT2 : DataConfig::HF_JSON);
         c.mark("data.tokenizer");
       }}},
      // Megatron's HuggingFaceTokenizer names a model folder (or hub name): troupe reads
      // its tokenizer.json; a path ending in .json is the file itself.
      {"tokenizer-model", string_flag("data.tokenizer_file", [](Config& c, const std::string& v) {
         const bool file = v.size() >= 5 && v.compare(v.size() - 5, 5, ".json") == 0;
         c.mutable_data()->set_tokenizer_file(file ? v : v + (v.empty() || v.back() == '/' ? "" : "/") + "tokenizer.json");
       })},
      {"vocab-file", string_flag("data.vocab_file", [](Config& c, const std::string& v) { c.mutable_data()->set_vocab_file(v); })},
      {"merge-file", string_flag("data.merges_file", [](Config& c, const std::string& v) { c.mutable_data()->set_merges_file(v); })},
      {"save", string_flag("checkpoint.dir", [](Config& c, const std::string& v) { c.mutable_checkpoint()->set_dir(v); })},
      {"load", string_flag("checkpoint.load", [](Config& c, const std::string& v) { c.mutable_checkpoint()->set_load(v); })},
      {"save-interval", int32_flag("checkpoint.interval_steps", [](Config& c, int32_t v) {
         c.mutable_checkpoint()->set_interval_steps(v);
       })},
      {"eval-interval", int32_flag("training.eval_interval", [](Config& c, int32_t v) {
         c.mutable_training()->set_eval_interval(v);
       })},
      {"log-interval", int32_flag("logging.log_interval", [](Config& c, int32_t v) {
         c.mutable_logging()->set_log_interval(v);
       })},
  };
  return table;
}

// Why a few well-known flags are unsupported, shown next to them in the error.
const std::map<std::string, const char*>& reasons() {
  static const std::map<std::string, const char*> table = {
      {"fp16", "troupe computes in bf16 on GPU; use --bf16"},
      {"train-iters", "troupe counts training in samples; use --train-samples"},
      {"lr-decay-iters", "troupe counts the schedule in samples; use --lr-decay-samples"},
      {"lr-warmup-iters", "troupe counts the schedule in samples; use --lr-warmup-samples"},
      {"lr-warmup-fraction", "troupe counts the schedule in samples; use --lr-warmup-samples"},
      {"rampup-batch-size", "troupe keeps the global batch fixed"},
      {"data-cache-path", "troupe keeps a dataset's sample index beside it (PREFIX.*), not in a cache folder"},
  };
  return table;
}

// The family the fragment describes. Megatron's knobs are independent; troupe's two
// families are bundles: GPT2 (LayerNorm, GELU, learned positions, biases) and LLAMA
// (RMSNorm, SwiGLU, rotary positions, no linear biases). A fragment naming any LLAMA
// feature must name all four; a mix is refused with what is missing.
// One way of naming the data: a blend over the splits (--data-path or --data-args-path)
// or per-split blends (--train/valid/test-data-path or --per-split-data-args-path).
void settle_blends(const std::vector<Occurrence>& occurrences, const std::string& source) {
  const Occurrence* whole = nullptr;
  const Occurrence* per_split = nullptr;
  for (const auto& o : occurrences) {
    if (o.name == "data-path" || o.name == "data-args-path") {
      if (whole && whole->name != o.name)
        throw ConfigError(fmt::format("{}:{}: --{}: give --data-path or --data-args-path (line {}), not both", source,
                                      o.line, o.name, whole->line));
      whole = &o;
    }
    if (o.name == "train-data-path" || o.name == "valid-data-path" || o.name == "test-data-path" ||
        o.name == "per-split-data-args-path")
      per_split = &o;
  }
  if (whole && per_split)
    throw ConfigError(fmt::format("{}:{}: --{}: a blend over the splits (--{}, line {}) and per-split blends do not "
                                  "go together: Megatron reads one or the other",
                                  source, per_split->line, per_split->name, whole->name, whole->line));
}

void settle_family(const std::vector<Occurrence>& occurrences, ParsedConfig& out, const std::string& source) {
  auto last = [&](const std::string& name) -> const Occurrence* {
    const Occurrence* found = nullptr;
    for (const auto& o : occurrences)
      if (o.name == name) found = &o;
    return found;
  };
  auto value_is = [&](const std::string& name, const std::string& v) {
    const Occurrence* o = last(name);
    return o && o->value && *o->value == v;
  };
  struct Feature {
    const char* flag;
    bool present;
  };
  const Feature features[] = {
      {"--normalization RMSNorm", value_is("normalization", "RMSNorm")},
      {"--swiglu", last("swiglu") != nullptr},
      {"--position-embedding-type rope", value_is("position-embedding-type", "rope") ||
                                             last("use-rotary-position-embeddings") != nullptr},
      {"--disable-bias-linear", last("disable-bias-linear") != nullptr},
  };
  std::string have, missing;
  for (const auto& f : features) {
    std::string& list = f.present ? have : missing;
    list += (list.empty() ? "" : ", ") + std::string(f.flag);
  }
  const Occurrence* gqa = last("group-query-attention");
  const Occurrence* groups = last("num-query-groups");
  if (groups && !gqa)
    throw ConfigError(fmt::format("{}:{}: --num-query-groups: has no effect without --group-query-attention "
                                  "(Megatron-LM ignores it); add that flag or drop this one",
                                  source, groups->line));
  if (have.empty()) {
    if (gqa)
      throw ConfigError(fmt::format("{}:{}: --group-query-attention: troupe's GPT2 family is multi-head; grouped "
                                    "queries come with the LLAMA features ({})",
                                    source, gqa->line, missing));
    return;
  }
  if (!missing.empty())
    throw ConfigError(fmt::format("{}: the fragment sets {} but not {}: troupe's LLAMA family is RMSNorm, SwiGLU, "
                                  "rotary positions and no linear biases together",
                                  source, have, missing));
  auto& m = *out.config.mutable_model();
  m.set_architecture(ModelConfig::LLAMA);
  out.origins.set("model.architecture", source + " (--normalization RMSNorm --swiglu ...)");
  if (gqa && !groups) {
    m.set_kv_heads(1);  // Megatron-LM's default num_query_groups
    out.origins.set("model.kv_heads", fmt::format("{}:{} (--group-query-attention)", source, gqa->line));
  }
  if (!last("ffn-hidden-size")) {
    // Megatron-LM's SwiGLU default: 2/3 of 4 h, rounded down to a multiple of 64.
    m.set_ffn_width(int32_t(int64_t(4) * m.width() * 2 / 3 / 64 * 64));
    out.origins.set("model.ffn_width", source + " (Megatron-LM's --swiglu default: 8h/3 rounded down to 64)");
  }
}

// Megatron-LM trains with dropout unless told otherwise (--hidden-dropout and
// --attention-dropout default to 0.1), so a fragment that leaves them out means 0.1,
// not troupe's own default of 0; the origin says where the value came from.
void settle_dropout(const std::vector<Occurrence>& occurrences, ParsedConfig& out, const std::string& source) {
  auto present = [&](const char* name) {
    for (const auto& o : occurrences)
      if (o.name == name) return true;
    return false;
  };
  auto& m = *out.config.mutable_model();
  if (!present("hidden-dropout")) {
    m.set_hidden_dropout(0.1f);
    out.origins.set("model.hidden_dropout", source + " (Megatron-LM's default --hidden-dropout 0.1)");
  }
  if (!present("attention-dropout")) {
    m.set_attention_dropout(0.1f);
    out.origins.set("model.attention_dropout", source + " (Megatron-LM's default --attention-dropout 0.1)");
  }
}

// --num-layers-per-virtual-pipeline-stage N: v = num-layers / (pipeline x N) model
// chunks a stage, known once every flag is applied. Megatron refuses it beside
// --virtual-pipeline-model-parallel-size, and so does this.
void settle_virtual_pipeline(const std::vector<Occurrence>& occurrences, ParsedConfig& out, const std::string& source) {
  const Occurrence *per = nullptr, *size = nullptr;
  for (const auto& o : occurrences) {
    if (o.name == "num-layers-per-virtual-pipeline-stage") per = &o;
    if (o.name == "virtual-pipeline-model-parallel-size") size = &o;
  }
  if (!per) return;
  if (size)
    throw ConfigError(fmt::format("{}:{}: --num-layers-per-virtual-pipeline-stage: give it or "
                                  "--virtual-pipeline-model-parallel-size (line {}), not both",
                                  source, per->line, size->line));
  const int64_t n = std::stoll(*per->value);
  auto& par = *out.config.mutable_parallel();
  const int64_t layers = out.config.model().layers(), p = par.pipeline();
  if (layers % (p * n) != 0)
    throw ConfigError(fmt::format("{}:{}: --num-layers-per-virtual-pipeline-stage: {} layers a chunk do not divide "
                                  "--num-layers {} over --pipeline-model-parallel-size {}",
                                  source, per->line, n, layers, p));
  const int32_t v = int32_t(layers / (p * n));
  par.set_virtual_stages(v);
  par.set_schedule(v > 1 ? ParallelConfig::INTERLEAVED_1F1B : ParallelConfig::ONE_F_ONE_B);
  const std::string where = fmt::format("{}:{} (--num-layers-per-virtual-pipeline-stage {}: {} layers / ({} x {}))",
                                        source, per->line, n, layers, p, n);
  out.origins.set("parallel.virtual_stages", where);
  out.origins.set("parallel.schedule", where);
}

}  // namespace

ParsedConfig parse_megatron_args(std::string_view text, const std::string& source_name) {
  const std::vector<Token> tokens = tokenize(text, source_name);

  // Pass 1: group words into flag occurrences; collect every unsupported flag.
  std::vector<Occurrence> occurrences;
  std::vector<std::string> unsupported;
  for (size_t i = 0; i < tokens.size();) {
    const Token& t = tokens[i];
    if (t.text.size() < 3 || t.text.compare(0, 2, "--") != 0)
      throw ConfigError(fmt::format("{}:{}: expected a flag (--name), got \"{}\"", source_name,
                                    t.line, t.text));
    Occurrence occ{t.text.substr(2), std::nullopt, t.line};
    if (const auto eq = occ.name.find('='); eq != std::string::npos) {
      occ.value = occ.name.substr(eq + 1);
      occ.name.resize(eq);
    }
    ++i;
    const auto it = flags().find(occ.name);
    if (it == flags().end()) {
      const auto why = reasons().find(occ.name);
      unsupported.push_back(fmt::format("--{} (line {}{}{})", occ.name, occ.line,
                                        why == reasons().end() ? "" : ": ",
                                        why == reasons().end() ? "" : why->second));
      // Skip its values: the words up to the next flag.
      while (i < tokens.size() && tokens[i].text.compare(0, 2, "--") != 0) ++i;
      continue;
    }
    if (it->second.takes_value && !occ.value) {
      if (i >= tokens.size() || tokens[i].text.compare(0, 2, "--") == 0)
        throw ConfigError(fmt::format("{}:{}: --{}: expects a value", source_name, occ.line, occ.name));
      occ.value = tokens[i++].text;
    }
    if (takes_words(occ.name)) {
      // --data-path W1 P1 W2 P2 ...: every word up to the next flag.
      occ.words.push_back(*occ.value);
      while (i < tokens.size() && tokens[i].text.compare(0, 2, "--") != 0) occ.words.push_back(tokens[i++].text);
    } else if (!it->second.takes_value && occ.value) {
      throw ConfigError(fmt::format("{}:{}: --{}: takes no value (got \"{}\")", source_name,
                                    occ.line, occ.name, *occ.value));
    }
    occurrences.push_back(std::move(occ));
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += (list.empty() ? "" : ", ") + u;
    throw ConfigError(fmt::format("{}: unsupported Megatron-LM flag{}: {}", source_name,
                                  unsupported.size() > 1 ? "s" : "", list));
  }

  // Pass 2: apply, in order (a repeated flag: the last one wins, as in argparse).
  ParsedConfig out{Config(), Origins(source_name)};
  for (const auto& occ : occurrences)
    flags().at(occ.name).apply(Context{out.config, out.origins, source_name, occ});
  settle_blends(occurrences, source_name);
  settle_family(occurrences, out, source_name);
  settle_dropout(occurrences, out, source_name);
  settle_virtual_pipeline(occurrences, out, source_name);
  return out;
}

ParsedConfig parse_megatron_args_file(const std::string& path) {
  return parse_megatron_args(read_config_file(path), path);
}

}  // namespace troupe::config
