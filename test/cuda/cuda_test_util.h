// Helpers of the CUDA tests: the skip rule, random inputs, device round trips and
// the norm-wise relative error every comparison uses.
//
// Skip rule: every test case that needs a GPU starts with REQUIRE_GPU(); without a
// usable device it logs "SKIPPED: no CUDA device: <reason>" and returns, so the CTest
// entry passes on machines without a GPU and says why nothing was checked.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace troupe::testing {

inline bool gpu_or_skip() {
  std::string why;
  if (kernels::cuda::gpu_available(&why)) return true;
  MESSAGE("SKIPPED: no CUDA device: " << why);
  return false;
}

// At least n GPUs (NCCL allows one rank per GPU), or logs why not.
inline bool gpus_or_skip(int n) {
  if (!gpu_or_skip()) return false;
  if (kernels::cuda::device_count() >= n) return true;
  MESSAGE("SKIPPED: needs " << n << " CUDA devices (one rank per GPU), found " << kernels::cuda::device_count());
  return false;
}

#define REQUIRE_GPU()                                   \
  do {                                                  \
    if (!::troupe::testing::gpu_or_skip()) return;      \
  } while (0)

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline std::vector<int32_t> randint(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline kernels::Buffer upload(kernels::Device& dev, const std::vector<float>& v) {
  kernels::Buffer b = dev.allocate(int64_t(v.size()), kernels::DType::kF32);
  dev.copy_from_host(b.f32(), v.data(), v.size() * sizeof(float));
  return b;
}
inline kernels::Buffer upload(kernels::Device& dev, const std::vector<int32_t>& v) {
  kernels::Buffer b = dev.allocate(int64_t(v.size()), kernels::DType::kI32);
  dev.copy_from_host(b.i32(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

// A device buffer of n floats, every one NaN: outputs that a kernel must overwrite
// start poisoned, so an element it never writes fails the comparison.
inline kernels::Buffer poisoned(kernels::Device& dev, size_t n) {
  return upload(dev, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}

using kernels::download;

// ||out - ref|| / ||ref|| over all elements (NaN when anything is NaN, so a NaN never
// passes a "<= bound" check). ref must not be all zeros (the caller's inputs are random).
inline double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  REQUIRE(out.size() == ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

inline size_t bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) same += std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
  return same;
}

}  // namespace troupe::testing
