#include "data/gpt2_pretokenize.h"

#include <cstdint>

#include "data/unicode_text.h"

namespace troupe::data {
namespace {

using Cls = CharClass;

struct Char {
  Cls cls;
  uint8_t bytes;  // UTF-8 length of this character
};

// Invalid or truncated sequences yield a one-byte character of class Other.
Char decode(std::string_view s, size_t i) {
  const Utf8Char c = decode_utf8(s, i);
  return {char_class(c.cp), c.bytes};
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
