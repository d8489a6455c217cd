// libFuzzer: any bytes as a tokenizer.json pre-tokenizer pattern and a text. The first
// byte gives the pattern's length. Compiling throws DataError or gives a regex whose
// Isolated split of the text is non-empty pieces that concatenate back to it; anything
// else (a crash, a sanitizer report, a lost byte) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/error.h"
#include "data/hf_regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t n = std::min<size_t>(size - 1, data[0]);
  const std::string pattern(reinterpret_cast<const char*>(data + 1), n);
  const std::string text(reinterpret_cast<const char*>(data + 1 + n), size - 1 - n);
  try {
    const troupe::data::PreTokenizerRegex re(pattern, "fuzz");
    troupe::data::DecodedText scratch;
    std::vector<std::pair<size_t, size_t>> pieces;
    re.split_isolated(text, scratch, pieces);
    std::string joined;
    for (const auto& [b, e] : pieces) {
      if (e <= b) std::abort();
      joined.append(text, b, e - b);
    }
    if (joined != text) std::abort();
  } catch (const troupe::data::DataError&) {
  }
  return 0;
}
