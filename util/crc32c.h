// CRC-32C (Castagnoli), as used by checkpoint shards and TFRecord framing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::util {

// Extends `crc` (0 for a fresh checksum) over `n` bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c_masked(uint32_t crc);

}  // namespace troupe::util
