// UTF-8 decoding and the Unicode classes the pre-tokenizers need (ICU's general
// categories and White_Space), shared by GPT-2's hand-written pre-tokenizer and the
// regex engine of Hugging Face tokenizer.json files (data/hf_regex.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::data {

// A code point that no valid character has: what a byte that does not start a valid
// UTF-8 sequence decodes to. It is in no general category and is not White_Space.
constexpr char32_t kInvalidUtf8 = 0x110000;

struct Utf8Char {
  char32_t cp;    // kInvalidUtf8 for an invalid or truncated sequence
  uint8_t bytes;  // UTF-8 length (1 for an invalid byte: it stands alone)
};

// Decodes the character at s[i] (i < s.size()). Overlong forms, surrogates, values past
// U+10FFFF and truncated sequences are invalid: one byte of cp kInvalidUtf8.
Utf8Char decode_utf8(std::string_view s, size_t i);

// GPT-2's classes: \p{L}, \p{N}, \s (Unicode White_Space), and everything else
// (an invalid byte included). White_Space wins over a category.
enum class CharClass : uint8_t { Letter, Number, Space, Other };
CharClass char_class(char32_t cp);

// ICU's general-category mask bit of cp (U_GC_*_MASK); 0 for kInvalidUtf8.
uint32_t general_category_mask(char32_t cp);
bool is_white_space(char32_t cp);
// A word character as the Rust regex crate's Unicode \w has it (what HF tokenizers'
// single_word added tokens test): Alphabetic, a mark, a decimal digit, a connector
// punctuation (_), or a join control (ZWJ, ZWNJ). kInvalidUtf8 is none.
bool is_word_character(char32_t cp);

// `bytes` as text the way HF tokenizers' decoders return it (Rust's
// String::from_utf8_lossy, and Python's bytes.decode(errors="replace")): each maximal
// subpart of an ill-formed sequence becomes one U+FFFD, valid UTF-8 stays as it is.
std::string utf8_lossy(std::string_view bytes);

}  // namespace troupe::data

namespace troupe::data {

// Unicode Normalization Form C of `s` (ICU's). Bytes that are not valid UTF-8 stay as
// they are, and each valid stretch between them is normalized on its own.
std::string nfc(std::string_view s);

}  // namespace troupe::data
