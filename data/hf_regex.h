// The regular expressions of Hugging Face tokenizer.json pre-tokenizers (Split's
// "Regex" pattern), matched the way HF tokenizers' Oniguruma engine matches them:
// leftmost match, alternatives tried in order, greedy quantifiers that backtrack.
//
// A small backtracking engine for exactly the constructs real files use (GPT-2's
// pattern, Llama 3's / cl100k's, Qwen2's, o200k's):
//   alternation |, groups (...) (?:...) (?i:...), lookahead (?=...) (?!...),
//   classes [...] [^...] with ranges, literals and escapes, ., \s \S, \p{X} \P{X}
//   for a Unicode general category X (L, Lu, ..., N, Nd, ..., P, S, Z, C and their
//   subcategories), escapes \r \n \t \f \v \xHH \x{H..} \uHHHH and escaped
//   punctuation, quantifiers ? * + {m} {m,} {m,n} (greedy) on a single-character
//   item, and ? on a group.
// Anything else (lazy or possessive quantifiers, repeated groups other than ?,
// backreferences, lookbehind, anchors, \d \w \b, inline flags other than (?i:...))
// is refused at compile time, naming the construct and its offset.
//
// \s is Unicode White_Space and \p{..} ICU's general categories (data/unicode_text.h);
// (?i:...) compares Unicode simple case folds. Input is UTF-8; a byte that is not
// valid UTF-8 is a character of its own in no category (it matches [^...] and \S).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::data {

// Text decoded once into code points, with each one's byte offset.
struct DecodedText {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;  // offsets[i]: byte offset of cps[i]; offsets[size] = byte length
  void assign(std::string_view s);
  size_t size() const { return cps.size(); }
};

class PreTokenizerRegex {
 public:
  // Throws DataError "WHERE: regex PATTERN: WHAT at offset N" for an unsupported
  // construct or a malformed pattern.
  PreTokenizerRegex(std::string_view pattern, const std::string& where);
  ~PreTokenizerRegex();
  PreTokenizerRegex(PreTokenizerRegex&&) noexcept;
  PreTokenizerRegex& operator=(PreTokenizerRegex&&) noexcept;

  // The leftmost non-empty match starting at character `from` or later, as
  // [begin, end) character indexes; nullopt when there is none. (None of the real
  // patterns can match the empty string; an empty match is skipped as no match.)
  std::optional<std::pair<size_t, size_t>> find(const DecodedText& text, size_t from) const;

  // Splits `text` the way Split(behavior Isolated, invert false) does: each match is
  // a piece, and so is each stretch between matches. Appends byte ranges.
  void split_isolated(std::string_view text, DecodedText& scratch,
                      std::vector<std::pair<size_t, size_t>>& pieces) const;

 private:
  struct Program;
  std::unique_ptr<Program> p_;
};

}  // namespace troupe::data
