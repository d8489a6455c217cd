#include "config/import_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/derived.h"
#include "config/hf_config.h"
#include "config/origins.h"
#include "config/validate.h"

namespace troupe::config {
namespace {

constexpr int64_t kBytesVocab = 257;      // 256 byte values + EOD (data/tokenizer.h)
constexpr int64_t kGpt2Vocab = 50'257;    // GPT-2's vocab.json: 50,256 merges' tokens + <|endoftext|>

}  // namespace

std::string tokenizer_note(int64_t vocab_size, const std::string& tokenizer_json) {
  std::string out = fmt::format("# tokenizers for vocab_size {} (the data section's choice; the model is the same):\n",
                                vocab_size);
  if (!tokenizer_json.empty())
    out += fmt::format("#   data {{ tokenizer: HF_JSON tokenizer_file: \"{}\" }}  (the directory's own)\n",
                       tokenizer_json);
  else
    out += "#   data { tokenizer: HF_JSON tokenizer_file: \"...\" }  (a tokenizer.json whose IDs are below "
           "vocab_size)\n";
  out += "#   data { tokenizer: NONE prefix: \"...\" eod_id: ... }  (a dataset tokenized elsewhere, IDs below "
         "vocab_size)\n";
  if (vocab_size >= kBytesVocab)
    out += "#   data { tokenizer: BYTES }  (troupe's default: IDs 0-256)\n";
  else
    out += fmt::format("#   not BYTES, troupe's default: it needs {} IDs (256 bytes + EOD), the model has {}\n",
                       kBytesVocab, vocab_size);
  if (vocab_size >= kGpt2Vocab)
    out += "#   data { tokenizer: GPT2 vocab_file: \"...\" merges_file: \"...\" }  (GPT-2's 50257 IDs)\n";
  return out;
}

std::string import_config_text(const std::string& json, const std::string& source, const std::string& tokenizer_json) {
  const ModelConfig m = model_from_hf_config(json, source);
  // The section must stand on its own as a config: validated like any other, with a
  // tokenizer its vocabulary fits (BYTES, troupe's default, when it does; else the
  // HF_JSON one, whose file a run reads and checks), so that only the model is judged.
  Config c;
  *c.mutable_model() = m;
  c.mutable_batch()->set_seq_length(std::min(c.batch().seq_length(), m.max_positions()));
  if (m.vocab_size() < kBytesVocab) {
    c.mutable_data()->set_tokenizer(DataConfig::HF_JSON);
    c.mutable_data()->set_tokenizer_file(tokenizer_json.empty() ? "tokenizer.json" : tokenizer_json);
  }
  validate(c, Origins(source));
  return fmt::format("# from {}: {} parameters (config::parameter_count, vocabulary padded to {} rows at TP 1)\n",
                     source, parameter_count(c), padded_vocab(c)) +
         tokenizer_note(m.vocab_size(), tokenizer_json) + model_section_text(m);
}

}  // namespace troupe::config
