// The exp rows' AVX-512 and AVX2 variants (kernels/cpu/exp_rows.h) give the same bits:
// max_sum_exp, scaled_exp and softmax_row, every row length from 1 to 70 (tails of both
// widths) and a vocabulary-sized 4099, over inputs from the exp's clamps (|x| up to 100),
// the bulk, tiny values and signed zeros; scaled_exp and softmax_row in place and not,
// with guard elements past the row that neither may touch. SKIP with a message on a CPU
// without AVX-512. (Accuracy against double precision: the cross-entropy and attention
// tests of test_kernels, which run whichever variant the CPU selects.)
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/isa.h"
#include "test/support/isa_inputs.h"

using namespace troupe::kernels::cpu;
using troupe::testing::same_bits;

namespace {

std::vector<float> inputs(size_t n, uint32_t seed) { return troupe::testing::isa_inputs(n, seed, 3.f); }
bool same_bits(MaxSumExp a, MaxSumExp b) {
  return std::memcmp(&a.max, &b.max, sizeof(float)) == 0 && std::memcmp(&a.sum, &b.sum, sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("exp rows: the AVX-512 variants have the AVX2 variants' bits, every tail, in place and not") {
  if (!cpu_has_avx512()) {
    MESSAGE("SKIP: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL");
    return;
  }
  std::vector<int> lengths;
  for (int n = 1; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (int n : lengths) {
    CAPTURE(n);
    const auto x = inputs(size_t(n) + 3, uint32_t(n));  // three guard elements past the row
    CHECK(same_bits(max_sum_exp_avx2(x.data(), n), max_sum_exp_avx512(x.data(), n)));
    // A row whose max is a signed zero among zeros of both signs and negatives.
    std::vector<float> z(size_t(n), -0.f);
    for (int i = 0; i < n; ++i) z[size_t(i)] = i % 3 == 0 ? 0.f : i % 3 == 1 ? -0.f : -float(i);
    CHECK(same_bits(max_sum_exp_avx2(z.data(), n), max_sum_exp_avx512(z.data(), n)));

    const auto r = max_sum_exp_avx2(x.data(), n);
    std::vector<float> d2(x.size(), 7.f), d5(x.size(), 7.f);
    scaled_exp_avx2(d2.data(), x.data(), r.max, 0.37f, n);
    scaled_exp_avx512(d5.data(), x.data(), r.max, 0.37f, n);
    CHECK(same_bits(d2, d5));  // the guards too: neither writes past n
    auto i2 = x, i5 = x;
    scaled_exp_avx2(i2.data(), i2.data(), r.max, 0.37f, n);
    scaled_exp_avx512(i5.data(), i5.data(), r.max, 0.37f, n);
    CHECK(same_bits(i2, i5));

    std::vector<float> p2(x.size(), 7.f), p5(x.size(), 7.f);
    softmax_row_avx2(p2.data(), x.data(), n, 0.125f);
    softmax_row_avx512(p5.data(), x.data(), n, 0.125f);
    CHECK(same_bits(p2, p5));
    CHECK(p2[size_t(n)] == 7.f);
    auto s2 = x, s5 = x;
    softmax_row_avx2(s2.data(), s2.data(), n, 1.f);
    softmax_row_avx512(s5.data(), s5.data(), n, 1.f);
    CHECK(same_bits(s2, s5));
  }
}
