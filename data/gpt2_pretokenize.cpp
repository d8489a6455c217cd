#include "data/gpt2_pretokenize.h"

#include <unicode/uchar.h>

#include <cstdint>

namespace troupe::data {
namespace {

enum class Cls : uint8_t { Letter, Number, Space, Other };

struct Char {
  Cls cls;
  uint8_t bytes;  // UTF-8 length of this character
  char32_t cp;
};

Cls classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return Cls::Letter;
    if (cp >= '0' && cp <= '9') return Cls::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) return Cls::Space;
    return Cls::Other;
  }
  if (u_isUWhiteSpace(UChar32(cp))) return Cls::Space;
  switch (u_charType(UChar32(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return Cls::Letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: return Cls::Number;
    default: return Cls::Other;
  }
}

// Decodes one character at s[i]; invalid or truncated sequences yield a one-byte
// character of class Other.
Char decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {classify(b0), 1, b0};
  int n = 0;
  char32_t cp = 0;
  if ((b0 & 0xe0) == 0xc0) { n = 2; cp = b0 & 0x1f; }
  else if ((b0 & 0xf0) == 0xe0) { n = 3; cp = b0 & 0x0f; }
  else if ((b0 & 0xf8) == 0xf0) { n = 4; cp = b0 & 0x07; }
  else return {Cls::Other, 1, 0xfffd};
  if (i + size_t(n) > s.size()) return {Cls::Other, 1, 0xfffd};
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + size_t(k)]);
    if ((b & 0xc0) != 0x80) return {Cls::Other, 1, 0xfffd};
    cp = (cp << 6) | (b & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {Cls::Other, 1, 0xfffd};
  return {classify(cp), uint8_t(n), cp};
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at s[i] == '\'', or 0.
size_t contraction(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return i + k < s.size() ? s[i + k] : '\0'; };
  const char c1 = at(1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if ((c1 == 'r' || c1 == 'v') && at(2) == 'e') return 3;
  if (c1 == 'l' && at(2) == 'l') return 3;
  return 0;
}

// End of the run of characters of class `cls` starting at i.
size_t run_end(std::string_view s, size_t i, Cls cls) {
  while (i < s.size()) {
    const Char c = decode(s, i);
    if (c.cls != cls) break;
    i += c.bytes;
  }
  return i;
}

}  // namespace

void gpt2_pretokenize(std::string_view s, std::vector<std::string_view>& pieces) {
  size_t i = 0;
  while (i < s.size()) {
    size_t end = 0;
    if (s[i] == '\'') {
      const size_t n = contraction(s, i);
      if (n > 0) end = i + n;
    }
    if (end == 0) {
      const Char c = decode(s, i);
      // " ?X+" alternatives: an optional U+0020, then a run of one class.
      size_t start = i;
      Cls cls = c.cls;
      if (s[i] == ' ' && i + 1 < s.size()) {
        const Char next = decode(s, i + 1);
        if (next.cls != Cls::Space) {
          start = i + 1;
          cls = next.cls;
        }
      }
      if (cls != Cls::Space) {
        end = run_end(s, start, cls);
      } else {
        // \s+(?!\S) | \s+
        const size_t run = run_end(s, i, Cls::Space);
        if (run == s.size()) {
          end = run;
        } else {
          // Find where the last whitespace character of the run starts.
          size_t last = i, k = i;
          while (k < run) {
            last = k;
            k += decode(s, k).bytes;
          }
          end = last > i ? last : run;
        }
      }
    }
    pieces.emplace_back(s.substr(i, end - i));
    i = end;
  }
}

}  // namespace troupe::data
