// GELU's two span variants (kernels/cpu/gelu.h), one thread, alternated: forward
// (y = gelu(x)) and backward (dx = dy * gelu'(x), out of place) over N elements
// (default 1 Mi: one layer's MLP activation on small, 1024 tokens x 1024), the median
// of R rounds (default 15) of each; the AVX-512 rows only on a CPU that has it.
//   gelu_bench [ELEMENTS] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/isa.h"
#include "bench/stats.h"

using namespace troupe::kernels::cpu;

namespace {

using troupe::bench::seconds;

using troupe::bench::median;

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t(1) << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  if (n < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: gelu_bench [ELEMENTS >= 1] [ROUNDS >= 1]\n");
    return 2;
  }
  std::printf("CPU: %s\n", cpu_features_line().c_str());
  const bool wide = cpu_has_avx512();
  const size_t count = static_cast<size_t>(n);
  std::vector<float> x(count), dy(count), out(count);
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.f, 1.5f);
  for (auto& v : x) v = d(gen);
  for (auto& v : dy) v = d(gen);
  std::vector<double> f2, b2, f5, b5;
  for (int r = 0; r < rounds; ++r) {
    f2.push_back(seconds([&] { gelu_span_avx2(out.data(), x.data(), n); }));
    b2.push_back(seconds([&] { gelu_backward_span_avx2(out.data(), dy.data(), x.data(), n); }));
    if (!wide) continue;
    f5.push_back(seconds([&] { gelu_span_avx512(out.data(), x.data(), n); }));
    b5.push_back(seconds([&] { gelu_backward_span_avx512(out.data(), dy.data(), x.data(), n); }));
  }
  const double e = double(n);
  std::printf("%lld elements, %d rounds, one thread, medians (ns per element)\n", static_cast<long long>(n), rounds);
  std::printf("  AVX2     forward %.3f  backward %.3f\n", median(f2) / e * 1e9, median(b2) / e * 1e9);
  if (wide)
    std::printf("  AVX-512  forward %.3f  backward %.3f  (AVX2 / AVX-512: %.2fx, %.2fx)\n", median(f5) / e * 1e9,
                median(b5) / e * 1e9, median(f2) / median(f5), median(b2) / median(b5));
  else
    std::printf("  AVX-512  not run: this CPU (or its OS) has no AVX-512 F/BW/DQ/VL\n");
  return 0;
}
