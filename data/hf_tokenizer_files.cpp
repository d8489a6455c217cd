#include "data/hf_tokenizer_files.h"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/atomic_file.h"
#include "data/byte_level_bpe.h"
#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"

namespace troupe::data {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxFileBytes = size_t(512) << 20;
const char* const kEndOfText = "<|endoftext|>";

Json special_token(int32_t id, const std::string& content) {
  return Json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
              {"rstrip", false},   {"normalized", false}, {"special", true}};
}

// A byte-level BPE tokenizer.json: GPT-2's regex pre-tokenizer when `use_regex`, else
// the whole text one piece (the byte tokenizer: every byte its own ID).
std::string byte_level_json(const std::map<int32_t, std::string>& vocab_by_id, const std::vector<std::string>& merges,
                            int32_t eod, const std::string& eod_token, bool use_regex) {
  Json vocab = Json::object();
  for (const auto& [id, token] : vocab_by_id) vocab[token] = id;
  const Json byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
  Json j{{"version", "1.0"},
         {"truncation", nullptr},
         {"padding", nullptr},
         {"added_tokens", Json::array({special_token(eod, eod_token)})},
         {"normalizer", nullptr},
         {"pre_tokenizer", byte_level},
         {"post_processor", nullptr},
         {"decoder", byte_level},
         {"model", Json{{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", false},
                        {"vocab", vocab},
                        {"merges", merges}}}};
  return j.dump(1) + "\n";
}

// `gpt2_like`: <|endoftext|> is BOS as well as EOS (GPT-2's own tokenizer_config), and
// "<|endoftext|>" in text is plain text (split_special_tokens), as troupe's bytes and
// gpt2 tokenizers read it. A tokenizer.json file keeps its BOS to itself.
std::string tokenizer_config(const std::string& eod_token, int64_t max_length, bool gpt2_like) {
  Json j{{"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (gpt2_like) j["bos_token"] = eod_token;
  j["eos_token"] = eod_token;
  j["model_max_length"] = max_length;
  j["clean_up_tokenization_spaces"] = false;
  if (gpt2_like) j["split_special_tokens"] = true;
  return j.dump(2) + "\n";
}

const char* kPlainTextNote =
    "tokenizer: \"<|endoftext|>\" in text is plain text to troupe's {} tokenizer; tokenizer_config.json sets "
    "split_special_tokens so AutoTokenizer agrees (tokenizers' Tokenizer.from_file needs encode_special_tokens = "
    "True for that)";

std::string note(const char* format, const std::string& name) {
  std::string s = format;
  s.replace(s.find("{}"), 2, name);
  return s;
}

TokenizerExport bytes_export(const Config& config) {
  std::map<int32_t, std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab[b] = byte_stand_ins()[size_t(b)];
  TokenizerExport e;
  e.files.emplace_back("tokenizer.json", byte_level_json(vocab, {}, 256, kEndOfText, false));
  e.files.emplace_back("tokenizer_config.json", tokenizer_config(kEndOfText, config.model().max_positions(), true));
  e.notes.push_back("tokenizer: bytes as a byte-level BPE tokenizer.json without merges: byte b is ID b, "
                    "<|endoftext|> (EOD) is 256");
  e.notes.push_back(note(kPlainTextNote, "bytes"));
  return e;
}

TokenizerExport gpt2_export(const Config& config) {
  const auto& d = config.data();
  make_gpt2_tokenizer(d.vocab_file(), d.merges_file());  // the same checks as a run's
  const std::string vocab_text = read_input_file(d.vocab_file(), "GPT-2 vocabulary (vocab.json)", kMaxFileBytes);
  const std::string merges_text = read_input_file(d.merges_file(), "GPT-2 merges (merges.txt)", kMaxFileBytes);
  std::map<int32_t, std::string> vocab;
  const nlohmann::json vocab_json = nlohmann::json::parse(vocab_text);  // valid: the tokenizer read it
  for (const auto& [token, id] : vocab_json.items()) vocab[id.get<int32_t>()] = token;
  std::vector<std::string> merges;
  std::istringstream lines(merges_text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(line);
  }
  int32_t eod = -1;
  for (const auto& [id, token] : vocab)
    if (token == kEndOfText) eod = id;
  TokenizerExport e;
  e.files.emplace_back("tokenizer.json", byte_level_json(vocab, merges, eod, kEndOfText, true));
  e.files.emplace_back("tokenizer_config.json", tokenizer_config(kEndOfText, config.model().max_positions(), true));
  e.files.emplace_back("vocab.json", vocab_text);
  e.files.emplace_back("merges.txt", merges_text);
  e.notes.push_back("tokenizer: gpt2 from " + d.vocab_file() + " and " + d.merges_file());
  e.notes.push_back(note(kPlainTextNote, "gpt2"));
  return e;
}

TokenizerExport hf_json_export(const Config& config) {
  const auto& d = config.data();
  const auto tok = make_hf_tokenizer(d.tokenizer_file(), d.eod_id() >= 0 ? std::optional<int32_t>(d.eod_id()) : std::nullopt);
  TokenizerExport e;
  e.files.emplace_back("tokenizer.json", read_input_file(d.tokenizer_file(), "Hugging Face tokenizer (tokenizer.json)", kMaxFileBytes));
  e.files.emplace_back("tokenizer_config.json", tokenizer_config(tok->eod_token(), config.model().max_positions(), false));
  e.notes.push_back("tokenizer: " + d.tokenizer_file() + " as it is, EOD \"" + tok->eod_token() + "\" (ID " +
                    std::to_string(tok->eod()) + ")");
  return e;
}

}  // namespace

TokenizerExport hf_tokenizer_export(const Config& config) {
  switch (config.data().tokenizer()) {
    case DataConfig::BYTES: return bytes_export(config);
    case DataConfig::GPT2: return gpt2_export(config);
    case DataConfig::HF_JSON: return hf_json_export(config);
    default: break;
  }
  TokenizerExport e;
  e.notes.push_back("tokenizer: none exported: data.tokenizer " + DataConfig::Tokenizer_Name(config.data().tokenizer()) +
                    " (a dataset tokenized elsewhere) has no Hugging Face tokenizer here");
  return e;
}

std::vector<std::string> write_tokenizer_export(const TokenizerExport& e, const std::string& out_dir) {
  std::vector<std::string> paths;
  for (const auto& [name, bytes] : e.files) {
    paths.push_back(out_dir + "/" + name);
    write_file_atomically(paths.back(), bytes);
  }
  return paths;
}

}  // namespace troupe::data
