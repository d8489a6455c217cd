// Dropout masks (kernels/dropout.h) and the CPU hidden-dropout kernel
// (kernels/cpu/dropout.cpp): Philox4x32-10 against the known-answer vectors of its
// authors' Random123 distribution; the kernel against the element-by-element rule;
// the share of dropped elements; independence from the thread count and from how
// rows are split (sequence parallelism hands each rank a block of rows); masks that
// follow the sample slot, not the microbatch row.
//
// Bounds, fixed before the first run: kept values equal x * scale exactly (one fp32
// product); the dropped share of n elements lies within 5 standard deviations
// sqrt(p (1 - p) / n) of p (the mask is a fixed function, so this is not a chance
// of failure but a check that the threshold and the bits are right).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/dropout.h"
#include "test/support/randn.h"

using namespace troupe::kernels;
using troupe::kernels::cpu::CpuDevice;
using troupe::testing::randn;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known-answer vectors") {
  auto check = [](uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                  std::vector<uint32_t> want) {
    const Philox4 r = philox4x32_10(c0, c1, c2, c3, k0, k1);
    CHECK(std::vector<uint32_t>(r.v, r.v + 4) == want);
  };
  check(0, 0, 0, 0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  check(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  check(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("a dropout mask: off at p = 0, threshold floor(p 2^32), scale 1 / (1 - p)") {
  CHECK_FALSE(make_dropout_mask(0.0f, 1, 0, 0).on());
  const DropoutMask m = make_dropout_mask(0.1f, 1, 0, 0);
  CHECK(m.on());
  CHECK(m.threshold == uint32_t(double(0.1f) * 4294967296.0));
  CHECK(m.scale == float(1.0 / (1.0 - double(0.1f))));
  CHECK(dropout_key(7, 3, DropoutSite::kMlpOutput) != dropout_key(7, 3, DropoutSite::kAttentionOutput));
  CHECK(dropout_key(7, 3, DropoutSite::kMlpOutput) != dropout_key(7, 4, DropoutSite::kMlpOutput));
  CHECK(dropout_key(7, 3, DropoutSite::kMlpOutput) != dropout_key(8, 3, DropoutSite::kMlpOutput));
}

TEST_CASE("hidden dropout: each element follows the rule, about p are dropped, the same bits however computed") {
  const int B = 4, T = 16, cols = 101;  // cols not a multiple of 4
  const int64_t rows = int64_t(B) * T;
  const float p = 0.1f;
  const DropoutMask m = make_dropout_mask(p, dropout_key(1234, 2, DropoutSite::kMlpOutput), 96, 0);
  const auto x = randn(size_t(rows) * cols, 90), add = randn(x.size(), 91);
  CpuDevice dev(2);
  std::vector<float> y(x.size()), z(x.size());
  dev.dropout(y.data(), x.data(), add.data(), 0, rows, cols, T, m);
  dev.dropout(z.data(), x.data(), nullptr, 0, rows, cols, T, m);
  size_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const bool keep = dropout_keep(m, m.key, m.first_slot + r / T, int(r % T), c);
      const float kept = keep ? x[i] * m.scale : 0.0f;
      bad += z[i] != kept || y[i] != add[i] + kept;
    }
  CHECK(bad == 0);

  // In place, for 1 and 3 threads, and as two row blocks (a sequence-parallel split).
  CpuDevice one(1), three(3);
  auto a = x, b = x;
  one.dropout(a.data(), a.data(), add.data(), 0, rows, cols, T, m);
  three.dropout(b.data(), b.data(), add.data(), 0, rows, cols, T, m);
  CHECK(same_bits(a, y));
  CHECK(same_bits(b, y));
  std::vector<float> split(x.size());
  const int64_t half = rows / 2 + 3;  // not a row boundary of a sample
  dev.dropout(split.data(), x.data(), add.data(), 0, half, cols, T, m);
  dev.dropout(split.data() + half * cols, x.data() + half * cols, add.data() + half * cols, half, rows - half, cols, T,
              m);
  CHECK(same_bits(split, y));

  // A sample's mask follows its slot: row b of a microbatch starting at slot s draws
  // what row b - 1 of one starting at s + 1 draws.
  DropoutMask shifted = m;
  shifted.first_slot = m.first_slot + 1;
  std::vector<float> w(size_t(T) * cols);
  dev.dropout(w.data(), x.data() + size_t(T) * cols, nullptr, 0, T, cols, T, shifted);
  CHECK(std::memcmp(w.data(), z.data() + size_t(T) * cols, w.size() * sizeof(float)) == 0);
}

TEST_CASE("hidden dropout drops p of a large tensor, and different keys draw different masks") {
  const int T = 256, cols = 1024;
  const int64_t n = int64_t(T) * cols;
  const std::vector<float> ones(size_t(n), 1.0f);
  CpuDevice dev(2);
  for (const float p : {0.1f, 0.5f}) {
    CAPTURE(p);
    const DropoutMask m = make_dropout_mask(p, dropout_key(99, 0, DropoutSite::kEmbedding), 0, 0);
    const DropoutMask other = make_dropout_mask(p, dropout_key(99, 1, DropoutSite::kEmbedding), 0, 0);
    std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
    dev.dropout(y.data(), ones.data(), nullptr, 0, T, cols, T, m);
    dev.dropout(z.data(), ones.data(), nullptr, 0, T, cols, T, other);
    int64_t dropped = 0, agree = 0;
    for (int64_t i = 0; i < n; ++i) {
      dropped += y[size_t(i)] == 0.0f;
      agree += (y[size_t(i)] == 0.0f) == (z[size_t(i)] == 0.0f);
      CHECK((y[size_t(i)] == 0.0f || y[size_t(i)] == m.scale));
    }
    const double share = double(dropped) / double(n), sd = std::sqrt(p * (1 - p) / double(n));
    CHECK(std::fabs(share - p) < 5 * sd);
    // Independent masks agree on p^2 + (1 - p)^2 of the elements.
    const double want = double(p) * p + (1.0 - p) * (1.0 - p);
    CHECK(std::fabs(double(agree) / double(n) - want) < 5 * std::sqrt(want * (1 - want) / double(n)));
  }
}
