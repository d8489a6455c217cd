#include "data/unicode_text.h"

#include <unicode/uchar.h>

namespace troupe::data {

Utf8Char decode_utf8(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  int n = 0;
  char32_t cp = 0;
  if ((b0 & 0xe0) == 0xc0) { n = 2; cp = b0 & 0x1f; }
  else if ((b0 & 0xf0) == 0xe0) { n = 3; cp = b0 & 0x0f; }
  else if ((b0 & 0xf8) == 0xf0) { n = 4; cp = b0 & 0x07; }
  else return {kInvalidUtf8, 1};
  if (i + size_t(n) > s.size()) return {kInvalidUtf8, 1};
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + size_t(k)]);
    if ((b & 0xc0) != 0x80) return {kInvalidUtf8, 1};
    cp = (cp << 6) | (b & 0x3f);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {kInvalidUtf8, 1};
  return {cp, uint8_t(n)};
}

uint32_t general_category_mask(char32_t cp) {
  if (cp >= kInvalidUtf8) return 0;
  return uint32_t(U_GET_GC_MASK(UChar32(cp)));
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
  return cp < kInvalidUtf8 && u_isUWhiteSpace(UChar32(cp));
}

bool is_word_character(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  if (cp >= kInvalidUtf8) return false;
  const uint32_t gc = general_category_mask(cp);
  return u_hasBinaryProperty(UChar32(cp), UCHAR_ALPHABETIC) || (gc & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(UChar32(cp), UCHAR_JOIN_CONTROL);
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned b0 = byte(i);
    if (b0 < 0x80) {
      out += char(b0);
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must lie in (Unicode's
    // table of well-formed UTF-8: no overlong forms, surrogates or values past U+10FFFF).
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) n = 2;
    else if (b0 >= 0xe0 && b0 <= 0xef) n = 3, lo = b0 == 0xe0 ? 0xa0 : 0x80, hi = b0 == 0xed ? 0x9f : 0xbf;
    else if (b0 >= 0xf0 && b0 <= 0xf4) n = 4, lo = b0 == 0xf0 ? 0x90 : 0x80, hi = b0 == 0xf4 ? 0x8f : 0xbf;
    size_t good = 1;  // bytes of a well-formed prefix so far
    if (n > 0) {
      while (good < n && i + good < s.size()) {
        const unsigned b = byte(i + good);
        if (b < (good == 1 ? lo : 0x80) || b > (good == 1 ? hi : 0xbf)) break;
        ++good;
      }
    }
    if (n > 0 && good == n) out.append(s.substr(i, n));
    else out += "\xef\xbf\xbd";  // U+FFFD for the maximal subpart s[i, i + good)
    i += good;
  }
  return out;
}

CharClass char_class(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) return CharClass::Space;
    return CharClass::Other;
  }
  if (is_white_space(cp)) return CharClass::Space;
  const uint32_t gc = general_category_mask(cp);
  if (gc & U_GC_L_MASK) return CharClass::Letter;
  if (gc & U_GC_N_MASK) return CharClass::Number;
  return CharClass::Other;
}

}  // namespace troupe::data

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "data/error.h"

namespace troupe::data {
namespace {

void nfc_valid(std::string_view s, std::string& out) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&err);
  std::vector<UChar> in(s.size() + 1), res;
  int32_t in_len = 0;
  if (U_SUCCESS(err)) u_strFromUTF8(in.data(), int32_t(in.size()), &in_len, s.data(), int32_t(s.size()), &err);
  if (U_SUCCESS(err) && unorm2_isNormalized(norm, in.data(), in_len, &err) && U_SUCCESS(err)) {
    out.append(s);
    return;
  }
  // NFC can grow a string by at most a factor 3 (UAX #15).
  res.resize(size_t(in_len) * 3 + 16);
  int32_t res_len = 0;
  if (U_SUCCESS(err)) res_len = unorm2_normalize(norm, in.data(), in_len, res.data(), int32_t(res.size()), &err);
  std::string bytes(size_t(res_len) * 3 + 16, '\0');
  int32_t bytes_len = 0;
  if (U_SUCCESS(err))
    u_strToUTF8(bytes.data(), int32_t(bytes.size()), &bytes_len, res.data(), res_len, &err);
  if (U_FAILURE(err)) throw DataError(std::string("NFC normalization failed: ") + u_errorName(err));
  out.append(bytes.data(), size_t(bytes_len));
}

}  // namespace

std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t valid_from = 0, i = 0;
  bool ascii = true;
  while (i < s.size()) {
    const Utf8Char c = decode_utf8(s, i);
    if (c.cp == kInvalidUtf8) {
      if (ascii) out.append(s.substr(valid_from, i - valid_from));
      else nfc_valid(s.substr(valid_from, i - valid_from), out);
      out += s[i];
      valid_from = i + 1;
      ascii = true;
    } else if (c.cp >= 0x80) {
      ascii = false;
    }
    i += c.bytes;
  }
  if (ascii) out.append(s.substr(valid_from));
  else nfc_valid(s.substr(valid_from), out);
  return out;
}

}  // namespace troupe::data
