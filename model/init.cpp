#include "model/init.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "util/thread_group.h"

namespace troupe::model {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  // Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11): 10 rounds of
  // two 32x32->64 multiplies with a Weyl-sequence key schedule.
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(M0) * c[0], p1 = uint64_t(M1) * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// Two normals from one Philox block.
struct NormalPair {
  double z0, z1;
};

NormalPair normals(uint64_t seed, uint64_t name_hash, uint64_t pair) {
  const auto r = philox4x32_10({uint32_t(pair), uint32_t(pair >> 32), uint32_t(name_hash), uint32_t(name_hash >> 32)},
                               {uint32_t(seed), uint32_t(seed >> 32)});
  // 64-bit uniforms in (0, 1) from two words each.
  const double u1 = (double((uint64_t(r[0]) << 21) ^ (uint64_t(r[1]) >> 11)) + 0.5) * 0x1p-53;
  const double u2 = (double((uint64_t(r[2]) << 21) ^ (uint64_t(r[3]) >> 11)) + 0.5) * 0x1p-53;
  const double rad = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  return {rad * std::cos(theta), rad * std::sin(theta)};
}

}  // namespace

double init_normal(uint64_t seed, std::string_view name, int64_t index) {
  const auto p = normals(seed, fnv1a64(name), uint64_t(index) / 2);
  return index % 2 == 0 ? p.z0 : p.z1;
}

namespace {

// Fills elements [lo, hi) (local, row-major over t.shape) of tensor t. The held
// slice is a box inside global_shape (rank 1 or 2 in GPT-2).
void fill_range(const ParamTensor& t, uint64_t seed, float* out, int64_t lo, int64_t hi) {
  const uint64_t h = fnv1a64(t.name);
  const bool matrix = t.shape.size() == 2;
  const int64_t cols = matrix ? t.shape[1] : 1;
  for (int64_t i = lo; i < hi; ++i) {
    int64_t row, global;
    if (matrix) {
      row = t.slice_start[0] + i / cols;
      global = row * t.global_shape[1] + t.slice_start[1] + i % cols;
    } else {
      row = t.slice_start[0] + i;
      global = row;
    }
    if (t.init == InitKind::kZeros || row >= t.valid_rows) {
      out[i] = 0.0f;  // zeros, or vocabulary padding rows
    } else if (t.init == InitKind::kOnes) {
      out[i] = 1.0f;
    } else {
      const auto p = normals(seed, h, uint64_t(global) / 2);
      out[i] = float(double(t.init_std) * (global % 2 == 0 ? p.z0 : p.z1));
    }
  }
}

}  // namespace

void init_parameters(const ParameterRegistry& reg, uint64_t seed, float* params, int threads) {
  if (threads < 1) threads = 1;
  for (const auto& t : reg.tensors()) {
    if (t.shape.size() > 2) throw std::logic_error("init_parameters: tensors of rank > 2 are not supported");
    float* out = params + t.offset;
    if (threads == 1 || t.numel < (1 << 16)) {
      fill_range(t, seed, out, 0, t.numel);
      continue;
    }
    util::run_on_threads(threads, "initialising the parameters", [&](int p) {
      fill_range(t, seed, out, t.numel * p / threads, t.numel * (p + 1) / threads);
    });
  }
}

}  // namespace troupe::model
