// The optimizer shard's kernels on the CPU (docs/performance.md, "The optimizer shard's
// reads"): AdamW with and without the update-to-weight sums of the spike record
// (Device::adamw_update vs adamw_update_norms), and the norm partial with its per-layer
// sums, as one read of the gradients (sum_squares_split_to_host) against the total and
// each layer read apart (the default Device's way); the best of 7 runs of each over N
// elements (default 16 Mi; 124000000 is GPT-2 124M's) cut into 14 equal layers, with T
// threads (default 1). Then a step's AdamW over many small pieces (P pieces of about
// E / P elements, decay and no decay alternating; default 18 pieces of 120,576 elements
// in all, tiny GPT-2's), one device call over all of them (Device::adamw_update_pieces)
// against the pieces one call each (the default Device's way), without and with the sums;
// medians of 301 alternated calls, since one is tens of microseconds.
//   adamw_bench [THREADS] [ELEMENTS] [PIECE_ELEMENTS PIECES]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/stats.h"
#include "kernels/cpu/cpu_device.h"

using namespace troupe::kernels;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : int64_t(16) << 20;
  const int64_t piece_elements = argc > 3 ? std::atoll(argv[3]) : 120576;
  const int pieces_count = argc > 4 ? std::atoi(argv[4]) : 18;
  if (threads < 1 || n < 1 || piece_elements < pieces_count || pieces_count < 1 || piece_elements > n) {
    std::fprintf(stderr,
                 "usage: adamw_bench [THREADS >= 1] [ELEMENTS >= 1] [PIECE_ELEMENTS <= ELEMENTS  PIECES >= 1, "
                 "<= PIECE_ELEMENTS]\n");
    return 2;
  }
  cpu::CpuDevice dev(threads);
  const size_t count = static_cast<size_t>(n);
  std::vector<float> p(count), g(count), m(count, 0.0f), v(count, 1e-4f);
  for (int64_t i = 0; i < n; ++i) {
    p[size_t(i)] = std::sin(0.1f * float(i));
    g[size_t(i)] = 1e-2f * std::cos(0.3f * float(i));
  }
  AdamWArgs a;
  a.lr = 1e-3f;
  a.weight_decay = 0.1f;
  a.bias_correction1 = 0.1f;
  a.bias_correction2 = 0.05f;
  double update_sq = 0, weight_sq = 0;
  auto best_of_7 = [&](bool sums) {
    double best = 1e30;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (sums)
        dev.adamw_update_norms(p.data(), g.data(), m.data(), v.data(), n, a, &update_sq, &weight_sq);
      else
        dev.adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  best_of_7(false);  // warm the pages and the pool
  best_of_7(true);
  const double plain = best_of_7(false), fused = best_of_7(true);
  std::printf("threads %d, %lld elements: adamw_update %.2f ms, adamw_update_norms %.2f ms (%.2fx)\n", threads,
              static_cast<long long>(n), plain * 1e3, fused * 1e3, fused / plain);

  // The norm partial: 14 layers (GPT-2 124M: wte, wpe, 12 blocks; here equal pieces).
  constexpr int kLayers = 14;
  std::vector<int64_t> ends;
  for (int l = 1; l <= kLayers; ++l) ends.push_back(std::max<int64_t>(l, n * l / kLayers));
  ends.back() = n;
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  std::vector<double> layer_sums(ends.size());
  double total = 0;
  auto best_of_7_norm = [&](bool one_read) {
    double best = 1e30;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (one_read)
        dev.sum_squares_split_to_host(&total, layer_sums.data(), g.data(), n, ends);
      else
        dev.Device::sum_squares_split_to_host(&total, layer_sums.data(), g.data(), n, ends);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  best_of_7_norm(false);
  const double two_reads = best_of_7_norm(false), one_read = best_of_7_norm(true);
  std::printf("threads %d, %lld elements, %zu layers: norm partial with layer sums, two reads %.2f ms, one read "
              "%.2f ms (%.2fx)\n",
              threads, static_cast<long long>(n), ends.size(), two_reads * 1e3, one_read * 1e3, two_reads / one_read);

  // A step over many small pieces: one call over all, against one call a piece.
  std::vector<AdamWPiece> pieces(static_cast<size_t>(pieces_count));
  std::vector<double> sums(2 * pieces.size());
  for (int i = 0; i < pieces_count; ++i) {
    pieces[size_t(i)].begin = piece_elements * i / pieces_count;
    pieces[size_t(i)].end = piece_elements * (i + 1) / pieces_count;
    pieces[size_t(i)].weight_decay = i % 2 ? 0.0f : 0.1f;
  }
  for (bool with_sums : {false, true}) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].update_sq = with_sums ? &sums[2 * i] : nullptr;
      pieces[i].weight_sq = with_sums ? &sums[2 * i + 1] : nullptr;
    }
    std::vector<double> one_call, per_piece;
    for (int r = 0; r < 301; ++r) {
      one_call.push_back(troupe::bench::seconds(
          [&] { dev.adamw_update_pieces(p.data(), g.data(), m.data(), v.data(), pieces, a); }));
      per_piece.push_back(troupe::bench::seconds(
          [&] { dev.Device::adamw_update_pieces(p.data(), g.data(), m.data(), v.data(), pieces, a); }));
    }
    const double one = troupe::bench::median(one_call), each = troupe::bench::median(per_piece);
    std::printf("threads %d, %d pieces, %lld elements%s: one call per piece %.1f us, one call for all %.1f us "
                "(%.2fx)\n",
                threads, pieces_count, static_cast<long long>(piece_elements), with_sums ? ", with sums" : "",
                each * 1e6, one * 1e6, each / one);
  }
  return 0;
}
