// Deterministic randomness that does not depend on the standard library's
// implementation (std::shuffle and the std distributions are implementation-
// defined): splitmix64 streams, unbiased bounded draws, Fisher-Yates, and a
// stateless keyed permutation of [0, n) for epoch orders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe::data {

// splitmix64's finaliser: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Combines values into one seed (order matters).
inline uint64_t mix_seed(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b + 0x9e3779b97f4a7c15ULL)); }

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  // Uniform in [0, n), n > 0, without modulo bias (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

// Shuffles v in place (Fisher-Yates) with the stream seeded by `seed`.
void shuffle(std::vector<int64_t>& v, uint64_t seed);

// A bijection of [0, n) chosen by `key`: a balanced Feistel network over the
// smallest even-bit power-of-two domain >= n, with cycle walking back into
// [0, n). Stateless, so concurrent callers need no lock; O(1) expected per call.
class KeyedPermutation {
 public:
  KeyedPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;
  // The position of `v` in the permutation: inverse(operator()(i)) == i.
  uint64_t inverse(uint64_t v) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t feistel(uint64_t x) const;
  uint64_t feistel_inverse(uint64_t x) const;
  uint64_t n_;
  uint64_t key_;
  unsigned half_bits_;
  uint64_t half_mask_;
};

// FNV-1a over bytes: the cache key hash (stable across builds and machines).
uint64_t fnv1a(const void* bytes, size_t n, uint64_t h = 0xcbf29ce484222325ULL);

}  // namespace troupe::data
