// GPT-2's pre-tokenization, written out by hand instead of with a regex engine.
// The pattern it implements (OpenAI's encoder.py, HF tokenizers' ByteLevel):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Alternatives are tried left to right at each position, each greedy. \p{L} and
// \p{N} are Unicode general categories (ICU), \s is Unicode White_Space, and " ?"
// is an optional U+0020 only. The one backtracking case: a whitespace run followed
// by a non-space gives up its last character, which then prefixes the next piece
// (" world"); a single whitespace character before a non-space matches \s+ alone.
//
// Input is UTF-8. A byte that does not start a valid UTF-8 sequence is taken as a
// one-byte character of its own that is neither letter, number nor space.
#pragma once

#include <string_view>
#include <vector>

namespace troupe::data {

// Splits `text` into pieces; their concatenation is `text`.
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace troupe::data
