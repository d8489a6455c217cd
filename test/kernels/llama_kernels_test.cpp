// The Llama family's CPU kernels (kernels/cpu/rope.cpp, swiglu.cpp, gqa_attention.cpp)
// against double-precision loops, their backwards against central differences of the
// double formulas, grouped-query attention with KV = NH against attention_forward /
// backward, and the same bits for 1 and 3 threads.
//
// Bounds, fixed before the first run (absolute unless said otherwise):
//   RoPE forward and backward: 2e-6 (one fp32 product and one fused multiply-add per
//     element of magnitude ~1);
//   SwiGLU forward and backward: 4e-6 * (1 + |ref|) (exp8 is about 2 ulp, then a division
//     and two or three products);
//   GQA attention: out 1e-5, att 1e-6, dqkv 2e-5 (T <= 13 dot products of ~1 values per
//     GEMM, a softmax and its backward in between);
//   GQA over several causal blocks (T = 75, hs <= 32): out 2e-5, att 2e-6, dqkv 1e-4
//     (dot products up to 75 terms long, about 6x the T <= 13 lengths);
//   GQA with KV = NH against attention_*: 1e-6;
//   central differences of the double formulas: 1e-6 (h = 1e-5, double).
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dropout.h"
#include "test/support/randn.h"

using troupe::kernels::cpu::CpuDevice;
using troupe::testing::max_abs_diff;
using troupe::testing::randn;

namespace {

constexpr double kRopeTol = 2e-6;
constexpr double kSwigluTol = 4e-6;
constexpr double kGqaOutTol = 1e-5, kGqaAttTol = 1e-6, kGqaGradTol = 2e-5;
constexpr double kBlocksOutTol = 2e-5, kBlocksAttTol = 2e-6, kBlocksGradTol = 1e-4;
constexpr double kVsMhaTol = 1e-6;
constexpr double kFdTol = 1e-6;
constexpr double kFdStep = 1e-5;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// max_i |a - r| / (1 + |r|)
double max_rel1_diff(const std::vector<float>& a, const std::vector<double>& r) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - r[i]) / (1 + std::fabs(r[i])));
  return m;
}

// ---- RoPE ------------------------------------------------------------------------

// cos, sin [P, hs/2] with theta_i = 10000^(-2i/hs), as model/layers/rope.h's tables.
struct RopeTables {
  std::vector<float> cos, sin;
  RopeTables(int P, int hs) {
    const int half = hs / 2;
    for (int p = 0; p < P; ++p)
      for (int i = 0; i < half; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / hs);
        cos.push_back(float(std::cos(a)));
        sin.push_back(float(std::sin(a)));
      }
  }
};

// The rotation in double from the float tables: sign +1 forward, -1 backward.
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int32_t>& pos, const RopeTables& tab,
                             int N, int heads, int hs, int64_t ld, double sign) {
  std::vector<double> y = x;
  const int half = hs / 2;
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < heads; ++j)
      for (int i = 0; i < half; ++i) {
        const size_t a = size_t(n * ld + j * hs + i), b = a + size_t(half);
        const double c = tab.cos[size_t(pos[size_t(n)] * half + i)], s = sign * tab.sin[size_t(pos[size_t(n)] * half + i)];
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[b] * c + x[a] * s;
      }
  return y;
}

// Two rows of T tokens; row 0 holds documents [0, 5) and [5, T), row 1 one document, so
// positions restart mid-row.
std::vector<int32_t> positions_two_rows(int T) {
  std::vector<int32_t> p(size_t(2) * T);
  for (int t = 0; t < T; ++t) {
    p[size_t(t)] = t < 5 ? t : t - 5;
    p[size_t(T + t)] = t;
  }
  return p;
}

// ---- GQA reference ------------------------------------------------------------------

struct Gqa {
  int B, T, NH, KV, hs;
  int64_t ld() const { return int64_t(NH + 2 * KV) * hs; }
  int64_t C() const { return int64_t(NH) * hs; }
  size_t q(int b, int t, int h, int i) const { return size_t((int64_t(b) * T + t) * ld() + h * hs + i); }
  size_t k(int b, int t, int kv, int i) const { return size_t((int64_t(b) * T + t) * ld() + C() + kv * hs + i); }
  size_t v(int b, int t, int kv, int i) const {
    return size_t((int64_t(b) * T + t) * ld() + C() + (KV + kv) * hs + i);
  }
  size_t o(int b, int t, int h, int i) const { return size_t((int64_t(b) * T + t) * C() + h * hs + i); }
};

// The attention-dropout factor of element (b, h, t, s): scale or 0 from
// kernels::dropout_keep, 1 without a mask (the reference draws element by element).
double keep_factor(const troupe::kernels::DropoutMask* drop, int b, int h, int t, int s) {
  if (!drop || !drop->on()) return 1.0;
  const uint64_t key = troupe::kernels::head_key(drop->key, drop->first_col + h);
  return troupe::kernels::dropout_keep(*drop, key, drop->first_slot + b, t, s) ? double(drop->scale) : 0.0;
}

// Double-precision forward: out, att (probabilities, 0 outside the mask; undropped).
void gqa_forward_ref(const Gqa& g, const std::vector<double>& qkv, const std::vector<int32_t>& start,
                     std::vector<double>& out, std::vector<double>& att,
                     const troupe::kernels::DropoutMask* drop = nullptr) {
  out.assign(size_t(g.B) * g.T * g.C(), 0.0);
  att.assign(size_t(g.B) * g.NH * g.T * g.T, 0.0);
  const double scale = 1 / std::sqrt(double(g.hs));
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h) {
      const int kv = h / (g.NH / g.KV);
      for (int t = 0; t < g.T; ++t) {
        const int s0 = start[size_t(b * g.T + t)];
        double* p = &att[((size_t(b) * g.NH + h) * g.T + t) * g.T];
        double mx = -1e300, z = 0;
        for (int s = s0; s <= t; ++s) {
          double d = 0;
          for (int i = 0; i < g.hs; ++i) d += qkv[g.q(b, t, h, i)] * qkv[g.k(b, s, kv, i)];
          p[s] = d * scale;
          mx = std::max(mx, p[s]);
        }
        for (int s = s0; s <= t; ++s) z += (p[s] = std::exp(p[s] - mx));
        for (int s = s0; s <= t; ++s) p[s] /= z;
        for (int i = 0; i < g.hs; ++i) {
          double acc = 0;
          for (int s = s0; s <= t; ++s) acc += p[s] * keep_factor(drop, b, h, t, s) * qkv[g.v(b, s, kv, i)];
          out[g.o(b, t, h, i)] = acc;
        }
      }
    }
}

// Double-precision backward from the reference probabilities: dqkv.
// With a dropout mask M (factor m): dP = m dO V^T, dV = (m P)^T dO.
std::vector<double> gqa_backward_ref(const Gqa& g, const std::vector<double>& qkv, const std::vector<double>& att,
                                     const std::vector<float>& dout, const std::vector<int32_t>& start,
                                     const troupe::kernels::DropoutMask* drop = nullptr) {
  std::vector<double> d(qkv.size(), 0.0);
  const double scale = 1 / std::sqrt(double(g.hs));
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h) {
      const int kv = h / (g.NH / g.KV);
      for (int t = 0; t < g.T; ++t) {
        const int s0 = start[size_t(b * g.T + t)];
        const double* p = &att[((size_t(b) * g.NH + h) * g.T + t) * g.T];
        std::vector<double> dp(size_t(g.T), 0.0);
        double dot = 0;
        for (int s = s0; s <= t; ++s) {
          for (int i = 0; i < g.hs; ++i) dp[size_t(s)] += double(dout[g.o(b, t, h, i)]) * qkv[g.v(b, s, kv, i)];
          dp[size_t(s)] *= keep_factor(drop, b, h, t, s);
          dot += p[s] * dp[size_t(s)];
        }
        for (int s = s0; s <= t; ++s) {
          const double ds = p[s] * (dp[size_t(s)] - dot) * scale;
          for (int i = 0; i < g.hs; ++i) {
            d[g.q(b, t, h, i)] += ds * qkv[g.k(b, s, kv, i)];
            d[g.k(b, s, kv, i)] += ds * qkv[g.q(b, t, h, i)];
            d[g.v(b, s, kv, i)] += p[s] * keep_factor(drop, b, h, t, s) * dout[g.o(b, t, h, i)];
          }
        }
      }
    }
  return d;
}

// The double backward rd at the elements idxs against central differences of the
// double forward's sum(out * dout) (with drop's mask when given).
void check_by_differences(const Gqa& g, const std::vector<double>& qkv, const std::vector<int32_t>& start,
                          const std::vector<float>& dout, const std::vector<double>& rd,
                          std::initializer_list<size_t> idxs, const troupe::kernels::DropoutMask* drop = nullptr) {
  auto objective = [&](const std::vector<double>& v) {
    std::vector<double> o, a;
    gqa_forward_ref(g, v, start, o, a, drop);
    double sum = 0;
    for (size_t i = 0; i < o.size(); ++i) sum += o[i] * dout[i];
    return sum;
  };
  for (size_t idx : idxs) {
    auto p = qkv, m = qkv;
    p[idx] += kFdStep, m[idx] -= kFdStep;
    CAPTURE(idx);
    CHECK(std::fabs((objective(p) - objective(m)) / (2 * kFdStep) - rd[idx]) < kFdTol);
  }
}

// doc_start for two rows: row 0 documents [0, 4), [4, 9), [9, T); row 1 one document.
std::vector<int32_t> doc_starts_two_rows(int T) {
  std::vector<int32_t> s(size_t(2) * T);
  for (int t = 0; t < T; ++t) {
    s[size_t(t)] = t < 4 ? 0 : t < 9 ? 4 : 9;
    s[size_t(T + t)] = 0;
  }
  return s;
}

}  // namespace

TEST_CASE("rope forward and backward match the rotation, positions restarting mid-row") {
  for (int hs : {8, 16, 24}) {  // 24: a head_dim that is no power of two (model.head_dim)
    CAPTURE(hs);
    const int T = 11, N = 2 * T, heads = 3;
    const int64_t ld = int64_t(heads) * hs + 5;  // columns past the heads stay untouched
    const RopeTables tab(T, hs);
    const auto pos = positions_two_rows(T);
    CpuDevice dev(2);
    const auto x = randn(size_t(N) * ld, 70);
    const std::vector<double> xd(x.begin(), x.end());
    auto y = x;
    dev.rope_forward(y.data(), pos.data(), tab.cos.data(), tab.sin.data(), N, heads, hs, ld);
    CHECK(max_abs_diff(y, rope_ref(xd, pos, tab, N, heads, hs, ld, 1)) < kRopeTol);
    auto dx = x;
    dev.rope_backward(dx.data(), pos.data(), tab.cos.data(), tab.sin.data(), N, heads, hs, ld);
    CHECK(max_abs_diff(dx, rope_ref(xd, pos, tab, N, heads, hs, ld, -1)) < kRopeTol);
    // Backward undoes forward (the rotation is orthogonal).
    dev.rope_backward(y.data(), pos.data(), tab.cos.data(), tab.sin.data(), N, heads, hs, ld);
    CHECK(max_abs_diff(y, xd) < 2 * kRopeTol);
    // Position 0 is the identity, bit for bit (cos 1, sin 0).
    for (int64_t c = 0; c < ld; ++c) CHECK(dx[size_t(c)] == x[size_t(c)]);
  }
}

TEST_CASE("rope backward is the gradient of the forward (central differences of the double formula)") {
  const int hs = 8, N = 3, heads = 2;
  const int64_t ld = heads * hs;
  const RopeTables tab(7, hs);
  const std::vector<int32_t> pos = {6, 2, 0};
  CpuDevice dev(1);
  const auto x = randn(size_t(N) * ld, 71), dout = randn(size_t(N) * ld, 72);
  auto g = dout;
  dev.rope_backward(g.data(), pos.data(), tab.cos.data(), tab.sin.data(), N, heads, hs, ld);
  const std::vector<double> xd(x.begin(), x.end());
  auto loss = [&](const std::vector<double>& v) {
    const auto y = rope_ref(v, pos, tab, N, heads, hs, ld, 1);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += dout[i] * y[i];
    return l;
  };
  std::vector<double> fd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    auto p = xd, m = xd;
    p[i] += kFdStep, m[i] -= kFdStep;
    fd[i] = (loss(p) - loss(m)) / (2 * kFdStep);
  }
  CHECK(max_abs_diff(g, fd) < kFdTol + kRopeTol);
}

TEST_CASE("swiglu forward and backward match the formulas, with aliasing and extreme gates") {
  const int64_t n = 1003;  // not a multiple of 8
  CpuDevice dev(2);
  auto gate = randn(size_t(n), 73, 4.0f);
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = -20.0f;
  const auto up = randn(size_t(n), 74), dout = randn(size_t(n), 75);
  std::vector<float> out(static_cast<size_t>(n)), dgate(static_cast<size_t>(n)), dup(static_cast<size_t>(n));
  dev.swiglu_forward(out.data(), gate.data(), up.data(), n);
  dev.swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  std::vector<double> rout(static_cast<size_t>(n)), rdg(static_cast<size_t>(n)), rdu(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    const double g = gate[i], sig = 1 / (1 + std::exp(-g)), silu = g * sig;
    rout[i] = silu * up[i];
    rdg[i] = double(dout[i]) * up[i] * sig * (1 + g * (1 - sig));
    rdu[i] = double(dout[i]) * silu;
  }
  CHECK(max_rel1_diff(out, rout) < kSwigluTol);
  CHECK(max_rel1_diff(dgate, rdg) < kSwigluTol);
  CHECK(max_rel1_diff(dup, rdu) < kSwigluTol);
  for (float v : out) CHECK(std::isfinite(v));
  // In place: dgate over gate, dup over up, the same bits.
  auto g2 = gate, u2 = up;
  dev.swiglu_backward(g2.data(), u2.data(), dout.data(), g2.data(), u2.data(), n);
  CHECK(same_bits(g2, dgate));
  CHECK(same_bits(u2, dup));

  // The closed form above against central differences of out = silu(g) u.
  auto f = [](double g, double u) { return g / (1 + std::exp(-g)) * u; };
  for (size_t i = 0; i < 40; ++i) {
    const double g = gate[i], u = up[i], sig = 1 / (1 + std::exp(-g));
    const double fd_g = (f(g + kFdStep, u) - f(g - kFdStep, u)) / (2 * kFdStep);
    const double fd_u = (f(g, u + kFdStep) - f(g, u - kFdStep)) / (2 * kFdStep);
    CAPTURE(i);
    CHECK(std::fabs(fd_g - u * sig * (1 + g * (1 - sig))) < kFdTol);
    CHECK(std::fabs(fd_u - g * sig) < kFdTol);
  }
}

TEST_CASE("grouped-query attention matches the double loops for KV = 1, 2, 4 of NH = 4, hs = 8, 16 and 24") {
  const int B = 2, T = 13, NH = 4;  // T not a multiple of 8; row 0 has three documents
  const auto start = doc_starts_two_rows(T);
  for (int hs : {8, 16, 24})
    for (int KV : {1, 2, 4}) {
      CAPTURE(hs);
      CAPTURE(KV);
      const Gqa g{B, T, NH, KV, hs};
      CpuDevice dev(2);
      const auto qkv = randn(size_t(B) * T * g.ld(), 76);
      std::vector<float> out(size_t(B) * T * g.C()), att(size_t(B) * NH * T * T, -1.0f);
      dev.gqa_attention_forward(out.data(), att.data(), qkv.data(), start.data(), B, T, NH, KV, hs, {});
      const std::vector<double> qd(qkv.begin(), qkv.end());
      std::vector<double> rout, ratt;
      gqa_forward_ref(g, qd, start, rout, ratt);
      CHECK(max_abs_diff(out, rout) < kGqaOutTol);
      CHECK(max_abs_diff(att, ratt) < kGqaAttTol);
      size_t outside_nonzero = 0;
      for (size_t i = 0; i < att.size(); ++i) outside_nonzero += ratt[i] == 0.0 && att[i] != 0.0f;
      CHECK(outside_nonzero == 0);

      const auto dout = randn(out.size(), 77);
      std::vector<float> dqkv(qkv.size(), NAN);  // overwritten, every element
      dev.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(), B, T, NH, KV, hs, {});
      const auto rd = gqa_backward_ref(g, qd, ratt, dout, start);
      CHECK(max_abs_diff(dqkv, rd) < kGqaGradTol);

      // The double backward against central differences of the double forward, at a q
      // element, a k and a v element of kv head 0 (shared by NH / KV query heads).
      check_by_differences(g, qd, start, dout, rd,
                           {g.q(0, 6, NH - 1, 1), g.k(0, 5, 0, 3), g.v(0, 10, 0, 2), g.k(1, 2, KV - 1, hs - 1)});
    }
}

TEST_CASE("grouped-query attention over several causal blocks matches the double loops, documents across block edges") {
  // The device's blocks (block = 0: 32 rows for hs = 32, three blocks, the last of 11;
  // 64 for hs = 16, two) and blocks of 7 rows (eleven, the last of 5), through the CPU
  // kernels on pools of 2, 1 and 3 threads; the device's blocks also with every product
  // through the process's sgemm (the path without the small AVX-512 kernel). Row 0's documents [0, 20), [20, 45),
  // [45, 70), [70, 75) start inside blocks and cross their edges; row 1 is one document.
  namespace cpu = troupe::kernels::cpu;
  cpu::use_single_threaded_blas();
  const int B = 2, T = 75, NH = 4;
  std::vector<int32_t> start(size_t(B) * T);
  for (int t = 0; t < T; ++t) {
    start[size_t(t)] = t < 20 ? 0 : t < 45 ? 20 : t < 70 ? 45 : 70;
    start[size_t(T + t)] = 0;
  }
  const auto drop = troupe::kernels::make_dropout_mask(0.2f, 0xb10cull, 40, 2);
  cpu::ThreadPool one(1), two(2), three(3);
  cpu::Scratch scratch;
  const troupe::kernels::cpu::AttentionPlan plans[] = {{0, false}, {7, false}, {0, true}};
  for (const auto& plan : plans)
    for (int hs : {16, 24, 32})
      for (int KV : {1, 2, 4})
        for (bool dropped : {false, true}) {
          CAPTURE(plan.block);
          CAPTURE(plan.process_gemm);
          CAPTURE(hs);
          CAPTURE(KV);
          CAPTURE(dropped);
          const troupe::kernels::DropoutMask mask = dropped ? drop : troupe::kernels::DropoutMask{};
          const Gqa g{B, T, NH, KV, hs};
          const auto qkv = randn(size_t(B) * T * g.ld(), 90);
          const auto dout = randn(size_t(B) * T * g.C(), 91);
          struct Result {
            std::vector<float> out, att, dqkv;
          };
          auto run = [&](cpu::ThreadPool& pool) {
            Result r{std::vector<float>(dout.size(), NAN), std::vector<float>(size_t(B) * NH * T * T, -1.0f),
                     std::vector<float>(qkv.size(), NAN)};  // every element overwritten
            cpu::gqa_attention_forward(pool, scratch, r.out.data(), r.att.data(), qkv.data(), start.data(), B, T, NH,
                                       KV, hs, mask, plan);
            cpu::gqa_attention_backward(pool, scratch, r.dqkv.data(), dout.data(), qkv.data(), r.att.data(),
                                        start.data(), B, T, NH, KV, hs, mask, plan);
            return r;
          };
          const Result r = run(two);
          const std::vector<double> qd(qkv.begin(), qkv.end());
          std::vector<double> rout, ratt;
          gqa_forward_ref(g, qd, start, rout, ratt, dropped ? &drop : nullptr);
          CHECK(max_abs_diff(r.out, rout) < kBlocksOutTol);
          CHECK(max_abs_diff(r.att, ratt) < kBlocksAttTol);
          size_t outside_nonzero = 0;
          for (size_t i = 0; i < r.att.size(); ++i) outside_nonzero += ratt[i] == 0.0 && r.att[i] != 0.0f;
          CHECK(outside_nonzero == 0);
          CHECK(max_abs_diff(r.dqkv, gqa_backward_ref(g, qd, ratt, dout, start, dropped ? &drop : nullptr)) <
                kBlocksGradTol);
          const Result r1 = run(one), r3 = run(three);
          CHECK(same_bits(r1.out, r3.out));
          CHECK(same_bits(r1.att, r3.att));
          CHECK(same_bits(r1.dqkv, r3.dqkv));
        }
}

TEST_CASE("grouped-query attention with KV = NH is multi-head attention") {
  const int B = 2, T = 13, NH = 4, hs = 8, C = NH * hs;
  const auto start = doc_starts_two_rows(T);
  CpuDevice dev(3);
  const auto qkv = randn(size_t(B) * T * 3 * C, 78), dout = randn(size_t(B) * T * C, 79);
  std::vector<float> o1(dout.size()), o2(dout.size()), a1(size_t(B) * NH * T * T), a2(a1.size());
  std::vector<float> d1(qkv.size()), d2(qkv.size());
  dev.attention_forward(o1.data(), a1.data(), qkv.data(), start.data(), B, T, C, NH, {});
  dev.attention_backward(d1.data(), dout.data(), qkv.data(), a1.data(), start.data(), B, T, C, NH, {});
  dev.gqa_attention_forward(o2.data(), a2.data(), qkv.data(), start.data(), B, T, NH, NH, hs, {});
  dev.gqa_attention_backward(d2.data(), dout.data(), qkv.data(), a2.data(), start.data(), B, T, NH, NH, hs, {});
  CHECK(max_abs_diff(o2, std::vector<double>(o1.begin(), o1.end())) < kVsMhaTol);
  CHECK(max_abs_diff(a2, std::vector<double>(a1.begin(), a1.end())) < kVsMhaTol);
  CHECK(max_abs_diff(d2, std::vector<double>(d1.begin(), d1.end())) < kVsMhaTol);
}

TEST_CASE("the Llama kernels give the same bits for 1 and 3 threads") {
  const int B = 2, T = 13, NH = 4, hs = 16;
  const auto start = doc_starts_two_rows(T);
  const auto pos = positions_two_rows(T);
  const RopeTables tab(T, hs);
  auto run = [&](CpuDevice& dev, int KV) {
    const Gqa g{B, T, NH, KV, hs};
    auto qkv = randn(size_t(B) * T * g.ld(), 80);
    const auto dout = randn(size_t(B) * T * g.C(), 81);
    std::vector<float> all;
    // RoPE on the q and k heads of qkv in place, then attention over the result.
    dev.rope_forward(qkv.data(), pos.data(), tab.cos.data(), tab.sin.data(), B * T, NH + KV, hs, g.ld());
    std::vector<float> out(dout.size()), att(size_t(B) * NH * T * T), dqkv(qkv.size());
    dev.gqa_attention_forward(out.data(), att.data(), qkv.data(), start.data(), B, T, NH, KV, hs, {});
    dev.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(), B, T, NH, KV, hs, {});
    dev.rope_backward(dqkv.data(), pos.data(), tab.cos.data(), tab.sin.data(), B * T, NH + KV, hs, g.ld());
    const int64_t n = 20000 + 5;  // several elementwise chunks and a tail
    const auto gate = randn(size_t(n), 82, 3.0f), up = randn(size_t(n), 83), d = randn(size_t(n), 84);
    std::vector<float> so(static_cast<size_t>(n)), dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
    dev.swiglu_forward(so.data(), gate.data(), up.data(), n);
    dev.swiglu_backward(dg.data(), du.data(), d.data(), gate.data(), up.data(), n);
    for (const auto* v : {&qkv, &out, &att, &dqkv, &so, &dg, &du}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  for (int KV : {1, 2, 4}) {
    CAPTURE(KV);
    CpuDevice one(1), three(3);
    CHECK(same_bits(run(one, KV), run(three, KV)));
  }
}

TEST_CASE("grouped-query attention refuses heads that do not group; rope refuses an odd head size") {
  CpuDevice dev(1);
  CHECK_THROWS_AS(dev.gqa_attention_forward(nullptr, nullptr, nullptr, nullptr, 1, 4, 4, 3, 8, {}), std::invalid_argument);
  CHECK_THROWS_AS(dev.gqa_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 6, 0, 8, {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(dev.rope_forward(nullptr, nullptr, nullptr, nullptr, 1, 1, 7, 7), std::invalid_argument);
}

TEST_CASE("attention dropout: grouped-query and multi-head kernels match the double loops with the same mask") {
  // The bounds of the undropped kernels above (a kept probability is scaled by 1/(1-p)
  // = 1.25, so products stay of the same size).
  const int B = 2, T = 13, NH = 4, hs = 8;
  const auto start = doc_starts_two_rows(T);
  const auto drop = troupe::kernels::make_dropout_mask(0.2f, 0x5eedull, 40, 2);  // heads 2.. of a wider model
  for (int KV : {1, 2, 4}) {
    CAPTURE(KV);
    const Gqa g{B, T, NH, KV, hs};
    CpuDevice dev(2);
    const auto qkv = randn(size_t(B) * T * g.ld(), 80);
    std::vector<float> out(size_t(B) * T * g.C()), att(size_t(B) * NH * T * T);
    dev.gqa_attention_forward(out.data(), att.data(), qkv.data(), start.data(), B, T, NH, KV, hs, drop);
    const std::vector<double> qd(qkv.begin(), qkv.end());
    std::vector<double> rout, ratt, plain;
    gqa_forward_ref(g, qd, start, rout, ratt, &drop);
    CHECK(max_abs_diff(out, rout) < kGqaOutTol);
    CHECK(max_abs_diff(att, ratt) < kGqaAttTol);  // att keeps the undropped probabilities
    gqa_forward_ref(g, qd, start, plain, ratt);
    CHECK(max_abs_diff(out, plain) > 100 * kGqaOutTol);  // the mask changed the output

    const auto dout = randn(out.size(), 81);
    std::vector<float> dqkv(qkv.size(), NAN);
    dev.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(), B, T, NH, KV, hs, drop);
    const auto rd = gqa_backward_ref(g, qd, ratt, dout, start, &drop);
    CHECK(max_abs_diff(dqkv, rd) < kGqaGradTol);
    // The masked double backward against central differences of the masked forward.
    check_by_differences(g, qd, start, dout, rd,
                         {g.q(0, 6, NH - 1, 1), g.k(0, 5, 0, 3), g.v(0, 10, 0, 2), g.v(1, 2, KV - 1, hs - 1)}, &drop);
    // The same bits for 1 and 3 threads.
    CpuDevice one(1), three(3);
    std::vector<float> o1(out.size()), o3(out.size()), a1(att.size()), a3(att.size()), d1(qkv.size()), d3(qkv.size());
    one.gqa_attention_forward(o1.data(), a1.data(), qkv.data(), start.data(), B, T, NH, KV, hs, drop);
    three.gqa_attention_forward(o3.data(), a3.data(), qkv.data(), start.data(), B, T, NH, KV, hs, drop);
    one.gqa_attention_backward(d1.data(), dout.data(), qkv.data(), a1.data(), start.data(), B, T, NH, KV, hs, drop);
    three.gqa_attention_backward(d3.data(), dout.data(), qkv.data(), a3.data(), start.data(), B, T, NH, KV, hs, drop);
    CHECK(same_bits(o1, o3));
    CHECK(same_bits(d1, d3));
  }
  // Multi-head attention (attention.cpp) with the mask is GQA with KV = NH.
  const int C = NH * hs;
  CpuDevice dev(3);
  const auto qkv = randn(size_t(B) * T * 3 * C, 82), dout = randn(size_t(B) * T * C, 83);
  std::vector<float> o1(dout.size()), o2(dout.size()), a1(size_t(B) * NH * T * T), a2(a1.size());
  std::vector<float> d1(qkv.size()), d2(qkv.size());
  dev.attention_forward(o1.data(), a1.data(), qkv.data(), start.data(), B, T, C, NH, drop);
  dev.attention_backward(d1.data(), dout.data(), qkv.data(), a1.data(), start.data(), B, T, C, NH, drop);
  dev.gqa_attention_forward(o2.data(), a2.data(), qkv.data(), start.data(), B, T, NH, NH, hs, drop);
  dev.gqa_attention_backward(d2.data(), dout.data(), qkv.data(), a2.data(), start.data(), B, T, NH, NH, hs, drop);
  CHECK(max_abs_diff(o2, std::vector<double>(o1.begin(), o1.end())) < kVsMhaTol);
  CHECK(max_abs_diff(d2, std::vector<double>(d1.begin(), d1.end())) < kVsMhaTol);
}
