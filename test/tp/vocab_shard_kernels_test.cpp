// The CPU device's vocabulary-parallel kernels against the whole-vocabulary ones.
// Exact where the arithmetic is the same (embeddings: each element is one add or a
// copy; one shard's cross-entropy runs the very loop of crossentropy_forward);
// otherwise within 1e-6 relative (a split sum of exps, combined in float).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_device.h"

using namespace troupe;

namespace {

std::vector<float> normals(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

}  // namespace

TEST_CASE("embedding shards add up to the whole embedding, and their gradients are its rows") {
  kernels::cpu::CpuDevice dev(3);
  const int N = 37, C = 21, V = 50, P = 16, S = 3, rows = 17;  // 3 shards of 17 rows cover 51 >= 50
  const auto wte = normals(size_t(V) * C, 1, 1.0f), wpe = normals(size_t(P) * C, 2, 1.0f);
  const auto dout = normals(size_t(N) * C, 3, 1.0f);
  std::vector<int32_t> tok(N), pos(N);
  for (int n = 0; n < N; ++n) tok[size_t(n)] = (n * 7 + 3) % V, pos[size_t(n)] = n % P;
  tok[5] = tok[6] = tok[30] = 16;  // repeated tokens, one at a shard edge
  tok[7] = 17;

  std::vector<float> whole(size_t(N) * C);
  dev.embedding_forward(whole.data(), tok.data(), pos.data(), wte.data(), wpe.data(), N, C);
  std::vector<float> dwte(size_t(V) * C, 0.5f), dwpe(size_t(P) * C, 0.25f);
  dev.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), pos.data(), N, C);

  std::vector<float> sum(size_t(N) * C, 0.0f);
  for (int s = 0; s < S; ++s) {
    const int begin = s * rows, held = std::min(rows, V - begin);
    std::vector<float> part(size_t(N) * C);
    dev.embedding_forward_shard(part.data(), tok.data(), pos.data(), wte.data() + int64_t(begin) * C,
                                s == 0 ? wpe.data() : nullptr, N, C, begin, held);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];  // shard order, as the all-reduce adds
    std::vector<float> g(size_t(held) * C, 0.5f), gp(size_t(P) * C, 0.25f);
    dev.embedding_backward_shard(g.data(), s == 0 ? gp.data() : nullptr, dout.data(), tok.data(), pos.data(), N, C,
                                 begin, held);
    for (int64_t i = 0; i < int64_t(held) * C; ++i) REQUIRE(g[size_t(i)] == dwte[size_t(int64_t(begin) * C + i)]);
    if (s == 0) CHECK(gp == dwpe);
  }
  CHECK(sum == whole);  // bitwise: x + 0 and 0 + x are exact
}

TEST_CASE("cross-entropy from shard partials: one shard is crossentropy_forward bit for bit, three agree") {
  kernels::cpu::CpuDevice dev(2);
  const int N = 9, V = 61, ld = 72;
  auto logits = normals(size_t(N) * ld, 4, 3.0f);
  std::vector<int32_t> targets(N);
  std::vector<float> mask(N, 1.0f);
  for (int n = 0; n < N; ++n) targets[size_t(n)] = (n * 13 + 5) % V;
  mask[3] = 0.0f;
  std::vector<float> losses(N), lse(N);
  dev.crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask.data(), N, V, ld);

  std::vector<float> part(3 * size_t(N)), l1(N), s1(N);
  dev.crossentropy_partials(part.data(), logits.data(), targets.data(), mask.data(), N, V, ld, 0);
  dev.crossentropy_combine(l1.data(), s1.data(), part.data(), 1, mask.data(), N);
  CHECK(l1 == losses);
  CHECK(s1 == lse);

  // Columns [0, 20), [20, 40), [40, 61) as three shards with their own row stride.
  const int bounds[] = {0, 20, 40, 61};
  std::vector<float> all(9 * size_t(N));
  std::vector<std::vector<float>> shard_logits(3);
  for (int s = 0; s < 3; ++s) {
    const int b = bounds[s], w = bounds[s + 1] - b, sld = 24;
    auto& sl = shard_logits[size_t(s)];
    sl.assign(size_t(N) * sld, 0.0f);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < w; ++j) sl[size_t(n * sld + j)] = logits[size_t(n * ld + b + j)];
    dev.crossentropy_partials(all.data() + s * 3 * N, sl.data(), targets.data(), mask.data(), N, w, sld, b);
  }
  std::vector<float> l3(N), s3(N);
  dev.crossentropy_combine(l3.data(), s3.data(), all.data(), 3, mask.data(), N);
  for (int n = 0; n < N; ++n) {
    CAPTURE(n);
    CHECK(std::fabs(s3[size_t(n)] - lse[size_t(n)]) <= 1e-6 * std::fabs(lse[size_t(n)]));
    CHECK(std::fabs(l3[size_t(n)] - losses[size_t(n)]) <= 1e-6 * std::fabs(lse[size_t(n)]));
  }
  CHECK(l3[3] == 0.0f);

  // Backward per shard with the combined lse equals the whole backward's columns.
  std::vector<float> dwhole(size_t(N) * ld);
  dev.crossentropy_backward(dwhole.data(), logits.data(), lse.data(), targets.data(), mask.data(), 0.25f, N, V, ld);
  for (int s = 0; s < 3; ++s) {
    const int b = bounds[s], w = bounds[s + 1] - b, sld = 24;
    std::vector<float> d(size_t(N) * sld, 9.0f);
    dev.crossentropy_backward_shard(d.data(), shard_logits[size_t(s)].data(), lse.data(), targets.data(), mask.data(),
                                    0.25f, N, w, sld, b);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < w; ++j) REQUIRE(d[size_t(n * sld + j)] == dwhole[size_t(n * ld + b + j)]);
      for (int j = w; j < sld; ++j) REQUIRE(d[size_t(n * sld + j)] == 0.0f);
    }
  }
}

TEST_CASE("a shard without real vocabulary columns contributes nothing") {
  kernels::cpu::CpuDevice dev(1);
  const int N = 4;
  std::vector<float> logits(size_t(N) * 8, 3.0f), part(3 * size_t(N));
  std::vector<int32_t> targets = {0, 1, 2, 3};
  std::vector<float> mask(N, 1.0f);
  dev.crossentropy_partials(part.data(), logits.data(), targets.data(), mask.data(), N, 0, 8, 64);
  for (int n = 0; n < N; ++n) {
    CHECK(std::isinf(part[size_t(n)]));
    CHECK(part[size_t(N + n)] == 0.0f);
    CHECK(part[size_t(2 * N + n)] == 0.0f);
  }
}
