// Inputs for the tests that compare a kernel's AVX2 and AVX-512 variants bit for bit
// (test/kernels/isa_*_test.cpp): every seventh value from [-100, 100] (past exp's
// clamps), tiny values near 1e-30, signed zeros, the rest normal with deviation `bulk`;
// and the bitwise comparison of two float vectors.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace troupe::testing {

inline std::vector<float> isa_inputs(size_t n, uint32_t seed, float bulk_deviation) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> bulk(0.f, bulk_deviation);
  std::uniform_real_distribution<float> wide(-100.f, 100.f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 7) {
      case 0: x[i] = wide(gen); break;
      case 1: x[i] = bulk(gen) * 1e-30f; break;
      case 2: x[i] = (i % 2) ? 0.f : -0.f; break;
      default: x[i] = bulk(gen);
    }
  }
  return x;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace troupe::testing
