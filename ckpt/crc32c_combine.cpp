#include "ckpt/crc32c_combine.h"

namespace troupe::ckpt {
namespace {

// A 32x32 matrix over GF(2), one column per word; multiplies a vector.
uint32_t times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, ++mat)
    if (vec & 1) sum ^= *mat;
  return sum;
}

void square(uint32_t* out, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) out[n] = times(mat, mat[n]);
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (len_b == 0) return crc_a;
  uint32_t even[32], odd[32];
  // The operator that feeds one zero bit through the (reflected) CRC register.
  odd[0] = 0x82F63B78u;
  for (int n = 1; n < 32; ++n) odd[n] = uint32_t(1) << (n - 1);
  square(even, odd);  // two zero bits
  square(odd, even);  // four zero bits
  // Apply len_b zero bytes to crc_a by repeated squaring (the first square gives one byte).
  do {
    square(even, odd);
    if (len_b & 1) crc_a = times(even, crc_a);
    len_b >>= 1;
    if (!len_b) break;
    square(odd, even);
    if (len_b & 1) crc_a = times(odd, crc_a);
    len_b >>= 1;
  } while (len_b);
  return crc_a ^ crc_b;
}

}  // namespace troupe::ckpt
