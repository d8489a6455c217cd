// The exp rows' two variants (kernels/cpu/exp_rows.h), one thread, alternated round by
// round, at small's shapes (bench/step_bench.cpp): the cross-entropy's max and sum of
// exps (max_sum_exp) and its gradient's exps (scaled_exp) over 1024 rows of the 4096
// logits, and the attention's softmax_row over one layer's rows (8 x 4 heads of 128 causal
// rows, lengths 1..128). Medians of R rounds (default 15) and of the rounds' AVX2 /
// AVX-512 ratios; the AVX-512 rows only on a CPU that has it.
//   exp_rows_bench [ROUNDS]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/exp_rows.h"
#include "kernels/cpu/isa.h"
#include "bench/stats.h"

using namespace troupe::kernels::cpu;
using troupe::bench::median;
using troupe::bench::seconds;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  if (rounds < 1) {
    std::fprintf(stderr, "usage: exp_rows_bench [ROUNDS >= 1]\n");
    return 2;
  }
  std::printf("CPU: %s\n", cpu_features_line().c_str());
  const bool wide = cpu_has_avx512();
  const int N = 1024, V = 4096, T = 128, heads = 32;
  std::vector<float> logits(size_t(N) * V), grad(logits.size()), scores(size_t(T) * T), probs(scores.size());
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.f, 2.f);
  for (auto& v : logits) v = d(gen);
  for (auto& v : scores) v = d(gen);
  std::vector<MaxSumExp> rows(static_cast<size_t>(N));
  using Fwd = MaxSumExp (*)(const float*, int);
  using Bwd = void (*)(float*, const float*, float, float, int);
  using Soft = void (*)(float*, const float*, int, float);
  auto ce_forward = [&](Fwd f) {
    return seconds([&] {
      for (int n = 0; n < N; ++n) rows[size_t(n)] = f(logits.data() + size_t(n) * V, V);
    });
  };
  auto ce_backward = [&](Bwd f) {
    return seconds([&] {
      for (int n = 0; n < N; ++n) f(grad.data() + size_t(n) * V, logits.data() + size_t(n) * V, 1.5f, 1e-3f, V);
    });
  };
  auto softmax = [&](Soft f) {
    return seconds([&] {
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < T; ++t) f(probs.data() + size_t(t) * T, scores.data() + size_t(t) * T, t + 1, 0.125f);
    });
  };
  const char* names[3] = {"cross-entropy max + sum of exps (1024 x 4096)", "cross-entropy gradient exps (1024 x 4096)",
                          "attention softmax rows (32 x 128 causal rows)"};
  std::vector<double> t2[3], t5[3], ratio[3];
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    const double a[3] = {ce_forward(max_sum_exp_avx2), ce_backward(scaled_exp_avx2), softmax(softmax_row_avx2)};
    double b[3] = {0, 0, 0};
    if (wide) {
      b[0] = ce_forward(max_sum_exp_avx512);
      b[1] = ce_backward(scaled_exp_avx512);
      b[2] = softmax(softmax_row_avx512);
    }
    if (r == 0) continue;
    for (int k = 0; k < 3; ++k) {
      t2[k].push_back(a[k]);
      t5[k].push_back(b[k]);
      if (wide) ratio[k].push_back(a[k] / b[k]);
    }
  }
  std::printf("%d rounds, one thread, medians (ms)\n", rounds);
  for (int k = 0; k < 3; ++k) {
    if (wide)
      std::printf("  %-48s AVX2 %7.3f  AVX-512 %7.3f  (AVX2 / AVX-512: %.2fx)\n", names[k], median(t2[k]) * 1e3,
                  median(t5[k]) * 1e3, median(ratio[k]));
    else
      std::printf("  %-48s AVX2 %7.3f  AVX-512 not run: no AVX-512 F/BW/DQ/VL\n", names[k], median(t2[k]) * 1e3);
  }
  return 0;
}
