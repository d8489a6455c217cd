#include "data/random.h"

#include <utility>

namespace troupe::data {

uint64_t SplitMix64::below(uint64_t n) {
  unsigned __int128 m = (unsigned __int128)next() * n;
  uint64_t low = uint64_t(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = (unsigned __int128)next() * n;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

void shuffle(std::vector<int64_t>& v, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = size_t(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

KeyedPermutation::KeyedPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  unsigned bits = 2;
  while (bits < 64 && (uint64_t(1) << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
}

uint64_t KeyedPermutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  constexpr int kRounds = 6;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t f = mix64(key_ ^ mix64(right + uint64_t(r) * 0x9e3779b97f4a7c15ULL)) & half_mask_;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyedPermutation::operator()(uint64_t i) const {
  // Cycle walking: the Feistel network permutes the 4^h domain; following the
  // cycle from i until it re-enters [0, n) gives a permutation of [0, n).
  uint64_t x = feistel(i);
  while (x >= n_) x = feistel(x);
  return x;
}

uint64_t KeyedPermutation::feistel_inverse(uint64_t x) const {
  // The rounds of feistel() undone in reverse order: a round maps (l, r) to
  // (r, l ^ f(r)), so (l', r') comes from (r' ^ f(l'), l').
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  constexpr int kRounds = 6;
  for (int r = kRounds - 1; r >= 0; --r) {
    const uint64_t f = mix64(key_ ^ mix64(left + uint64_t(r) * 0x9e3779b97f4a7c15ULL)) & half_mask_;
    const uint64_t prev_left = right ^ f;
    right = left;
    left = prev_left;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyedPermutation::inverse(uint64_t v) const {
  // Walking the cycle backwards from v until it re-enters [0, n) finds the i whose
  // forward walk stopped at v.
  uint64_t x = feistel_inverse(v);
  while (x >= n_) x = feistel_inverse(x);
  return x;
}

uint64_t fnv1a(const void* bytes, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace troupe::data
