// CPU kernels between two steps: the optimizer shard's norm partial with its layer sums
// (cpu::sum_squares_split, Device::sum_squares_split_to_host), the gradient zeroing
// (CpuDevice::fill_zero, split over the pool) and AdamW over many pieces in one pass
// (CpuDevice::adamw_update_pieces: bitwise the per-piece calls, so no tolerance).
// sum_squares_split: the total bitwise that
// of sum_squares over the same elements, each piece's sum against a long-double sum of
// its squares, and the same bits with 1 and 2 threads. Tolerance, set before any run:
// 1e-13 relative for a piece (exact squares in double, at most a few thousand additions
// each rounding by 2^-53).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/kernels.h"

using namespace troupe::kernels::cpu;

namespace {

std::vector<float> values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng) * 1e-2f;
  return x;
}

// piece_ends: the cuts of the case, ascending, the last n.
void check_split(int64_t n, const std::vector<int64_t>& piece_ends) {
  CAPTURE(n);
  CAPTURE(piece_ends.size());
  const auto x = values(n, uint32_t(n + piece_ends.size()));
  std::vector<double> sums_by_threads[2];
  double totals[2];
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    Scratch scratch;
    auto& sums = sums_by_threads[threads - 1];
    sums.assign(piece_ends.size(), -1.0);
    totals[threads - 1] = sum_squares_split(pool, scratch, x.data(), n, piece_ends.data(), int64_t(piece_ends.size()),
                                            sums.data());
    const double plain = sum_squares(pool, scratch, x.data(), n);
    CHECK(std::memcmp(&plain, &totals[threads - 1], sizeof plain) == 0);
    int64_t begin = 0;
    for (size_t p = 0; p < piece_ends.size(); ++p) {
      long double want = 0;
      for (int64_t i = begin; i < piece_ends[p]; ++i) want += (long double)x[size_t(i)] * x[size_t(i)];
      CHECK(std::fabs(double(want) - sums[p]) <= 1e-13 * double(want));
      begin = piece_ends[p];
    }
  }
  CHECK(std::memcmp(&totals[0], &totals[1], sizeof(double)) == 0);
  CHECK(std::memcmp(sums_by_threads[0].data(), sums_by_threads[1].data(), piece_ends.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("sum_squares_split: sum_squares' total, each piece once, with any cuts") {
  const int64_t block = 65536;
  check_split(1, {1});
  check_split(13, {13});
  check_split(13, {1, 2, 3, 9, 13});                 // several cuts inside one vector
  check_split(20, {8, 16, 20});                      // cuts on vector boundaries
  check_split(block, {5, block - 3, block});
  check_split(3 * block + 7, {block, 2 * block, 3 * block + 7});           // cuts on block boundaries
  check_split(3 * block + 7, {block - 1, block + 1, 3 * block, 3 * block + 7});
  check_split(5 * block + 3, {17, 4 * block + 100, 5 * block + 3});       // a piece over several blocks
  // Like a small GPT-2's layers: wte, wpe, 4 blocks, ln_f.
  check_split(4240896, {1048576, 1081344, 1871104, 2660864, 3450624, 4240384, 4240896});
}

TEST_CASE("sum_squares_split refuses pieces that do not tile [0, n)") {
  ThreadPool pool(1);
  Scratch scratch;
  const auto x = values(10, 1);
  double sums[2];
  CHECK_THROWS_AS(sum_squares_split(pool, scratch, x.data(), 10, std::vector<int64_t>{4, 9}.data(), 2, sums),
                  std::invalid_argument);
  CHECK_THROWS_AS(sum_squares_split(pool, scratch, x.data(), 10, std::vector<int64_t>{4, 4}.data(), 2, sums),
                  std::invalid_argument);
}

// CpuDevice::fill_zero splits large fills over the pool: every byte of the range zeroed,
// none outside it touched, whatever the size against the split's 2 MiB a participant.
TEST_CASE("CpuDevice::fill_zero over the pool: exactly the bytes asked for") {
  troupe::kernels::cpu::CpuDevice dev(2);
  for (size_t bytes : {size_t(0), size_t(1), size_t(4 << 20) - 1, size_t(4 << 20) + 3, size_t(10 << 20) + 5}) {
    CAPTURE(bytes);
    std::vector<unsigned char> buf(bytes + 128, 0xAB);
    dev.fill_zero(buf.data() + 64, bytes);
    size_t wrong = 0;
    for (size_t i = 0; i < buf.size(); ++i) wrong += buf[i] != ((i >= 64 && i < 64 + bytes) ? 0 : 0xAB);
    CHECK(wrong == 0);
  }
}

namespace {

// The pieces of one range, cut at `cuts` (ascending, the last the range's end); every
// third piece without decay, every second one measured.
std::vector<troupe::kernels::AdamWPiece> pieces_at(const std::vector<int64_t>& cuts) {
  std::vector<troupe::kernels::AdamWPiece> pieces;
  int64_t begin = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    troupe::kernels::AdamWPiece p;
    p.begin = begin;
    p.end = cuts[i];
    p.weight_decay = i % 3 == 2 ? 0.0f : 0.1f;
    pieces.push_back(p);
    begin = cuts[i];
  }
  return pieces;
}

// adamw_update_pieces against the same pieces through adamw_update / adamw_update_norms
// one by one on a one-thread device: parameters, moments and sums bitwise, for the given
// thread count, over three steps (the moments carry over).
void check_pieces(const std::vector<int64_t>& cuts, int threads) {
  CAPTURE(cuts.size());
  CAPTURE(cuts.back());
  CAPTURE(threads);
  const int64_t n = cuts.back();
  const auto grad = values(n, 7), start = values(n, 8);
  CpuDevice one(1), dev(threads);
  std::vector<float> p0 = start, p1 = start, m0(static_cast<size_t>(n)), v0 = m0, m1 = m0, v1 = m0;
  auto pieces = pieces_at(cuts);
  std::vector<double> sums0(2 * pieces.size(), -1.0), sums1(2 * pieces.size(), -2.0);
  for (size_t i = 0; i < pieces.size(); i += 2) {
    pieces[i].update_sq = &sums1[2 * i];
    pieces[i].weight_sq = &sums1[2 * i + 1];
  }
  troupe::kernels::AdamWArgs a;
  a.grad_scale = 0.5f;
  for (int step = 1; step <= 3; ++step) {
    a.lr = 1e-3f * float(step);
    a.bias_correction1 = float(1.0 - std::pow(0.9, step));
    a.bias_correction2 = float(1.0 - std::pow(0.95, step));
    for (size_t i = 0; i < pieces.size(); ++i) {
      const auto& pc = pieces[i];
      troupe::kernels::AdamWArgs ai = a;
      ai.weight_decay = pc.weight_decay;
      const int64_t b = pc.begin, len = pc.end - pc.begin;
      if (i % 2 == 0)
        one.adamw_update_norms(p0.data() + b, grad.data() + b, m0.data() + b, v0.data() + b, len, ai, &sums0[2 * i],
                               &sums0[2 * i + 1]);
      else
        one.adamw_update(p0.data() + b, grad.data() + b, m0.data() + b, v0.data() + b, len, ai);
    }
    dev.adamw_update_pieces(p1.data(), grad.data(), m1.data(), v1.data(), pieces, a);
    CHECK(std::memcmp(p0.data(), p1.data(), size_t(n) * sizeof(float)) == 0);
    CHECK(std::memcmp(m0.data(), m1.data(), size_t(n) * sizeof(float)) == 0);
    CHECK(std::memcmp(v0.data(), v1.data(), size_t(n) * sizeof(float)) == 0);
    for (size_t i = 0; i < pieces.size(); i += 2) {
      CHECK(std::memcmp(&sums0[2 * i], &sums1[2 * i], 2 * sizeof(double)) == 0);
      CHECK(sums1[2 * i + 1] > 0.0);  // the weights' sum: something was summed
    }
  }
  CHECK(std::memcmp(p1.data(), start.data(), size_t(n) * sizeof(float)) != 0);  // the update moved them
}

}  // namespace

TEST_CASE("adamw_update_pieces: bitwise the per-piece updates and sums, any thread count") {
  // Tiny GPT-2's kind of pieces (many, a few hundred to a few thousand elements, most not
  // multiples of 8), pieces across the 64 Ki-element blocks of the sums, one piece alone.
  std::vector<int64_t> small_pieces;
  for (int64_t at = 0, i = 0; i < 40; ++i) small_pieces.push_back(at += 64 + 37 * i + (i % 5) * 1001);
  const std::vector<std::vector<int64_t>> cases = {
      small_pieces, {3}, {65536}, {70001}, {100, 65636, 65637, 200000, 200013}, {131072 + 5, 131072 + 9 + 40000}};
  for (const auto& cuts : cases)
    for (int threads : {1, 2, 3}) check_pieces(cuts, threads);
}
