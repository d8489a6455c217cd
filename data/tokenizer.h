// Text -> token IDs. prepare-data appends eod() after each document.
// The tokenizers: bytes (byte_tokenizer.cpp), GPT-2 vocab.json + merges.txt
// (gpt2_tokenizer.cpp), Hugging Face tokenizer.json (hf_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  // IDs lie in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // End-of-document token.
  virtual int32_t eod() const = 0;
  // Appends the IDs of `text` to `out`. Not thread-safe (tokenizers may cache).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;
};

// "bytes": 256 byte values, EOD = 256.
std::unique_ptr<Tokenizer> make_byte_tokenizer();
// "gpt2": byte-level BPE from a GPT-2 vocab.json and merges.txt.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json,
                                               const std::string& merges_txt);
// What make_tokenizer builds: "bytes"; "gpt2" (vocab_json + merges_txt); "hf" (a
// Hugging Face tokenizer.json: data/hf_tokenizer.h, eod_id overriding its EOD rule).
struct TokenizerSpec {
  std::string name;
  std::string vocab_json, merges_txt;  // gpt2
  std::string tokenizer_json;          // hf
  std::optional<int32_t> eod_id;       // hf
};
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);
// By name ("bytes" or "gpt2"); vocab/merges are used by gpt2 only.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_json,
                                          const std::string& merges_txt);

}  // namespace troupe::data
