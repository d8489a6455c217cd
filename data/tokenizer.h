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
  // Hugging Face's encode(text, add_special_tokens=False): no BOS a post-processor adds.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;
  // Hugging Face's encode(text, add_special_tokens=True), the default of
  // `tokenizer(text)`: the IDs of `text` inside the single-sequence template of the
  // tokenizer's post-processor (a tokenizer.json's BOS); encode() for tokenizers
  // without one. Throws DataError for a post-processor troupe cannot apply.
  virtual void encode_with_special_tokens(std::string_view text, std::vector<int32_t>& out) { encode(text, out); }
  // The text of `ids` as Hugging Face's decode(ids, skip_special_tokens) returns it:
  // byte-level tokens turned back into bytes, the bytes of all the tokens joined, then
  // read as UTF-8 with U+FFFD for what is not (utf8_lossy). IDs the vocabulary does not
  // hold are left out, as HF does. Throws DataError for a decoder troupe does not have.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
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
