// CRC-32C of a concatenation from the CRCs of its parts, so that a shard writer
// checksums each piece's bytes once and still gets the whole file's CRC.
#pragma once

#include <cstdint>

namespace troupe::ckpt {

// crc32c(A + B) from crc32c(A), crc32c(B) and the length of B (as zlib's
// crc32_combine, over GF(2) with the Castagnoli polynomial). O(log len_b).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace troupe::ckpt
