// The CPU attention kernels (kernels/cpu/gqa_attention.cpp) at the step cases' shapes:
// one layer's forward + backward as the device runs it (causal blocks,
// kernels/cpu/causal_blocks.h, and the small AVX-512 products where they apply,
// kernels/cpu/head_loop.h) against two baselines, alternated round by round in one
// process: one block over whole rows (what the kernels did before the blocks), and every
// product through the process's sgemm. Per shape: the median forward and backward of
// the device's way and of whole rows, the step's share (layers x (forward + backward)),
// and the medians of the rounds' ratios (baseline / the device's way). Documents: one
// per row (the causal mask only), or --docs N: rows packed with documents of N tokens.
//   attention_bench [--threads N] [--rounds R] [--docs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/causal_blocks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/head_loop.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "test/support/randn.h"
#include "bench/stats.h"

namespace cpu = troupe::kernels::cpu;

namespace {

// Attention's shapes of bench/step_bench.cpp's cases, and two long rows.
struct Shape {
  const char* name;
  int layers, NH, KV, hs, T, B;
};
constexpr Shape kShapes[] = {
    {"tiny", 2, 4, 4, 16, 64, 8},         {"small", 4, 4, 4, 64, 128, 8},     {"gpt2-124m", 12, 12, 12, 64, 64, 4},
    {"llama-small", 4, 4, 2, 64, 128, 8}, {"llama-124m", 12, 12, 4, 64, 64, 4},
    // Not step_bench cases: small's heads, and GPT-2 124M's, at GPT-2's context of 1024.
    {"small-t1024", 4, 4, 4, 64, 1024, 1},    {"gpt2-t1024", 12, 12, 12, 64, 1024, 1},
};

using troupe::bench::seconds;

using troupe::bench::median;

int usage() {
  std::fprintf(stderr, "usage: attention_bench [--threads N >= 1] [--rounds R >= 1] [--docs N >= 1]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 15, docs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const int v = std::atoi(argv[++i]);
    if (v < 1) return usage();
    if (a == "--threads") threads = v;
    else if (a == "--rounds") rounds = v;
    else if (a == "--docs") docs = v;
    else return usage();
  }
  cpu::use_single_threaded_blas();
  cpu::ThreadPool pool(threads);
  cpu::Scratch scratch;
  std::printf("# %s\n", cpu::compute_description().c_str());
  std::printf("# %d threads, %d rounds alternated, medians; documents: %s\n", threads, rounds,
              docs ? (std::to_string(docs) + " tokens each").c_str() : "one per row");
  std::printf("# products: %s\n",
              cpu::small_products() ? "small_gemm_avx512 (K, N <= 256), the process's sgemm beyond"
                                    : "the process's sgemm (the small kernel needs AVX-512 and a GEMM not OpenBLAS)");
  std::printf("%-12s %3s %3s %3s %4s %2s %5s %8s %8s %8s %8s %8s %8s %7s %7s\n", "case", "NH", "KV", "hs", "T", "B",
              "block", "fwd ms", "bwd ms", "step ms", "whole f", "whole b", "step ms", "/whole", "/sgemm");
  for (const Shape& s : kShapes) {
    const int64_t ld = int64_t(s.NH + 2 * s.KV) * s.hs, C = int64_t(s.NH) * s.hs;
    const auto qkv = troupe::testing::randn(size_t(s.B) * s.T * ld, 1);
    const auto dout = troupe::testing::randn(size_t(s.B) * s.T * C, 2);
    std::vector<float> out(dout.size()), att(size_t(s.B) * s.NH * s.T * s.T), dqkv(qkv.size());
    std::vector<int32_t> start(size_t(s.B) * s.T);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < s.T; ++t) start[size_t(b * s.T + t)] = docs ? t / docs * docs : 0;
    // One layer's forward and backward under `plan`: {forward s, backward s}.
    auto layer = [&](const cpu::AttentionPlan& plan) {
      const double f = seconds([&] {
        cpu::gqa_attention_forward(pool, scratch, out.data(), att.data(), qkv.data(), start.data(), s.B, s.T, s.NH,
                                   s.KV, s.hs, {}, plan);
      });
      const double b = seconds([&] {
        cpu::gqa_attention_backward(pool, scratch, dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(),
                                    s.B, s.T, s.NH, s.KV, s.hs, {}, plan);
      });
      return std::pair<double, double>(f, b);
    };
    std::vector<double> bf, bb, wf, wb, whole_ratio, gemm_ratio;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
      const auto blocks = layer({}), whole = layer({s.T, false}), gemm = layer({0, true});
      if (r == 0) continue;
      bf.push_back(blocks.first);
      bb.push_back(blocks.second);
      wf.push_back(whole.first);
      wb.push_back(whole.second);
      whole_ratio.push_back((whole.first + whole.second) / (blocks.first + blocks.second));
      gemm_ratio.push_back((gemm.first + gemm.second) / (blocks.first + blocks.second));
    }
    const double mbf = median(bf) * 1e3, mbb = median(bb) * 1e3, mwf = median(wf) * 1e3, mwb = median(wb) * 1e3;
    std::printf("%-12s %3d %3d %3d %4d %2d %5d %8.3f %8.3f %8.2f %8.3f %8.3f %8.2f %7.2f %7.2f\n", s.name, s.NH, s.KV,
                s.hs, s.T, s.B, cpu::causal_block(s.hs), mbf, mbb, s.layers * (mbf + mbb), mwf, mwb,
                s.layers * (mwf + mwb), median(whole_ratio), median(gemm_ratio));
  }
  return 0;
}
