// GELU's AVX-512 and AVX2 span variants (kernels/cpu/gelu.h) give the same bits on
// every element: forward and backward, every span length from 0 to 70 (tails of both
// widths), in place and out of place, over inputs from the tails of the curve (|x| up
// to 100, where exp clamps), the bulk, subnormal-sized values and signed zeros. SKIP with a
// message on a CPU without AVX-512. (Accuracy against a double-precision GELU is
// test_kernels' "gelu, add, scale and sum of squares", which runs whichever variant
// the CPU selects.)
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/isa.h"
#include "test/support/isa_inputs.h"

using namespace troupe::kernels::cpu;
using troupe::testing::same_bits;

namespace {

std::vector<float> inputs(size_t n, uint32_t seed) { return troupe::testing::isa_inputs(n, seed, 2.f); }
bool same_first(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  return std::memcmp(a.data(), b.data(), size_t(n) * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("GELU spans: the AVX-512 variant has the AVX2 variant's bits, forward and backward, every tail") {
  if (!cpu_has_avx512()) {
    MESSAGE("SKIP: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL");
    return;
  }
  for (int64_t n = 0; n <= 70; ++n) {
    CAPTURE(n);
    const auto x = inputs(size_t(n) + 3, uint32_t(n));  // three guard elements past the span
    const auto dy = inputs(size_t(n) + 3, uint32_t(1000 + n));
    std::vector<float> y2(x.size(), 7.f), y5(x.size(), 7.f);
    gelu_span_avx2(y2.data(), x.data(), n);
    gelu_span_avx512(y5.data(), x.data(), n);
    CHECK(same_bits(y2, y5));  // the guards too: neither writes past n
    std::vector<float> d2(x.size(), 7.f), d5(x.size(), 7.f);
    gelu_backward_span_avx2(d2.data(), dy.data(), x.data(), n);
    gelu_backward_span_avx512(d5.data(), dy.data(), x.data(), n);
    CHECK(same_bits(d2, d5));
    // In place (dx = dy, as linear_backward calls it; y = x).
    auto i2 = dy, i5 = dy;
    gelu_backward_span_avx2(i2.data(), i2.data(), x.data(), n);
    gelu_backward_span_avx512(i5.data(), i5.data(), x.data(), n);
    CHECK(same_first(i2, d2, n));  // past n, i2 and i5 keep dy's values
    CHECK(same_first(i5, d5, n));
    CHECK(same_bits(i2, i5));
    auto g2 = x, g5 = x;
    gelu_span_avx2(g2.data(), g2.data(), n);
    gelu_span_avx512(g5.data(), g5.data(), n);
    CHECK(same_bits(g2, g5));
    for (int64_t i = n; i < int64_t(x.size()); ++i) CHECK(y2[size_t(i)] == 7.f);
  }
}

TEST_CASE("GELU spans: the dispatch follows the process's ISA") {
  const auto x = inputs(37, 5);
  std::vector<float> got(x.size()), want(x.size());
  gelu_span(got.data(), x.data(), int64_t(x.size()));
  if (active_isa() == Isa::kAvx512)
    gelu_span_avx512(want.data(), x.data(), int64_t(x.size()));
  else
    gelu_span_avx2(want.data(), x.data(), int64_t(x.size()));
  CHECK(same_bits(got, want));
}
