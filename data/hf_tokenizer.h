// Hugging Face tokenizer.json files of byte-level BPE models (GPT-2, Llama 3, Qwen2,
// SmolLM): encoding that matches HF tokenizers' Tokenizer.encode(text,
// add_special_tokens=False) ID for ID (docs/data.md, "HF_JSON").
//
// Supported: model type BPE (vocab; merges as "a b" strings or [a, b] pairs;
// ignore_merges; no dropout, no byte_fallback, no subword prefix or suffix), every
// byte's stand-in in the vocabulary; normalizer null or NFC; pre_tokenizer ByteLevel
// (use_regex: GPT-2's pattern; add_prefix_space), or a Sequence of Split (a "Regex"
// or "String" pattern, behavior Isolated, not inverted; data/hf_regex.h) and Digits
// steps ending in ByteLevel; added tokens (special or not, found in the text before
// pre-tokenization as HF's AddedVocabulary finds them: leftmost, longest, those with
// normalized false in the raw text and the others, as their normalized contents, after
// normalization; single_word only between non-word characters, lstrip / rstrip taking
// the whitespace before / after into the token).
// encode() is add_special_tokens=False: a document is its text's IDs, and prepare-data
// appends EOD. encode_with_special_tokens() applies the post-processor's
// single-sequence template (TemplateProcessing, BertProcessing, RobertaProcessing;
// ByteLevel changes no ID; a Sequence of them): Llama 3's <|begin_of_text|> first.
// decode() is HF's decode with the ByteLevel decoder (or none).
// Refused, naming the kind and the file: other model types (Unigram, WordPiece,
// WordLevel), other normalizers and pre-tokenizers, an rstrip added token beside one
// that starts with whitespace (HF matches those overlapping). A post-processor or a
// decoder of another kind is refused when encode_with_special_tokens() or decode() is
// called (what prepare-data does not need does not stop it).
//
// End of document: data.eod_id / --eod-id when given; else the first of
// kEodTokenNames that is a special added token (or, failing that, a vocabulary
// entry); else the file is refused for want of one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace troupe::data {

inline constexpr const char* kEodTokenNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

class HfTokenizer : public Tokenizer {
 public:
  // The path it was read from, and the content of its EOD token.
  virtual const std::string& path() const = 0;
  virtual const std::string& eod_token() const = 0;
};

// Reads and checks `path`; throws DataError naming the file (and the byte offset of a
// JSON error, the field of a refused setting). `eod_id` overrides the EOD rule; it must
// be an ID of the file.
std::unique_ptr<HfTokenizer> make_hf_tokenizer(const std::string& path, std::optional<int32_t> eod_id = {});

// What a run needs of the file without encoding (its vocabulary against
// model.vocab_size, its EOD for padding): the same checks but the merges'. Kept for
// the process while the file's size and modification time stay the same.
struct HfTokenizerSummary {
  int64_t vocab_size = 0;
  int32_t eod = -1;
  std::string eod_token;
};
HfTokenizerSummary read_hf_tokenizer_summary(const std::string& path, std::optional<int32_t> eod_id = {});

}  // namespace troupe::data
