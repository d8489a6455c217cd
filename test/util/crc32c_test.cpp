#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "util/crc32c.h"

using troupe::util::crc32c;

TEST_CASE("CRC-32C check values") {
  // The standard check value of CRC-32C over "123456789" and RFC 3720's test vectors.
  const std::string digits = "123456789";
  CHECK(crc32c(digits.data(), digits.size()) == 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(inc.data(), 32) == 0x46DD794Eu);
}

TEST_CASE("CRC-32C extends across pieces of any length") {
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char(i * 7 + 3);
  const uint32_t whole = crc32c(s.data(), s.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000})
    CHECK(crc32c(s.data() + cut, s.size() - cut, crc32c(s.data(), cut)) == whole);
}

TEST_CASE("masked CRC as TFRecord writes it") {
  CHECK(troupe::util::crc32c_masked(0) == 0xa282ead8u);
  CHECK(troupe::util::crc32c_masked(0x12345678u) == (((0x12345678u >> 15) | (0x12345678u << 17)) + 0xa282ead8u));
}
