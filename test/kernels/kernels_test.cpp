// CPU kernels against naive double-precision loops, plus the properties the runtime
// relies on: results independent of the thread count (all but gemm), bitwise
// repeatable, and safe on several devices at once.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "test/support/randn.h"
#include "kernels/cpu/cpu_device.h"

using namespace troupe::kernels;
using troupe::kernels::cpu::CpuDevice;

using troupe::testing::max_abs_diff;
using troupe::testing::randn;

namespace {

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

TEST_CASE("thread pool runs every participant once and rethrows errors") {
  cpu::ThreadPool pool(3);
  std::vector<int> hits(3, 0);
  for (int rep = 0; rep < 100; ++rep) pool.run([&](int p) { hits[size_t(p)]++; });
  CHECK(hits == std::vector<int>{100, 100, 100});
  CHECK_THROWS_WITH(pool.run([&](int p) { if (p == 2) throw std::runtime_error("boom"); }), "boom");
  int64_t total = 0;
  std::vector<int64_t> part(3, 0);
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) { part[size_t(b * 3 / 1000)] += e - b; });
  for (auto v : part) total += v;
  CHECK(total == 1000);
}

TEST_CASE("thread pool refuses a second caller while a run is in progress, and serves it afterwards") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    cpu::ThreadPool pool(threads);
    std::atomic<bool> inside{false}, release{false};
    std::thread first([&] {
      pool.run([&](int p) {
        if (p != 0) return;
        inside = true;
        while (!release) std::this_thread::yield();
      });
    });
    while (!inside) std::this_thread::yield();
    CHECK_THROWS_AS(pool.run([](int) {}), std::logic_error);
    release = true;
    first.join();
    int calls = 0;
    pool.run([&](int p) { if (p == 0) ++calls; });
    CHECK(calls == 1);
  }
}

TEST_CASE("gemm matches a double reference for every transpose combination") {
  CpuDevice dev(2);
  const int M = 67, N = 45, K = 130;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const auto A = randn(size_t(M) * K, 1), B = randn(size_t(K) * N, 2), C0 = randn(size_t(M) * N, 3);
      auto C = C0;
      const int lda = ta ? M : K, ldb = tb ? K : N;
      dev.gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C.data(), N);
      std::vector<double> ref(size_t(M) * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double s = 0;
          for (int k = 0; k < K; ++k)
            s += double(ta ? A[size_t(k) * M + i] : A[size_t(i) * K + k]) * double(tb ? B[size_t(j) * K + k] : B[size_t(k) * N + j]);
          ref[size_t(i) * N + j] = 0.5 * s + 2.0 * C0[size_t(i) * N + j];
        }
      CAPTURE(ta);
      CAPTURE(tb);
      CHECK(max_abs_diff(C, ref) < 1e-4);  // sums of 130 products of N(0,1): ~1e-6 relative to ~11
    }
}

TEST_CASE("linear forward fuses bias, residual and GELU; backward gives all three gradients") {
  const int N = 40, C = 24, OC = 72;
  CpuDevice dev(2);
  const auto x = randn(size_t(N) * C, 4), W = randn(size_t(C) * OC, 5, 0.2f), b = randn(OC, 6), res = randn(size_t(N) * OC, 7);
  std::vector<float> out(size_t(N) * OC), g(size_t(N) * OC);
  dev.linear_forward(out.data(), g.data(), x.data(), W.data(), b.data(), res.data(), N, C, OC);
  std::vector<double> ref(out.size()), gref(out.size());
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = res[size_t(n) * OC + o] + b[size_t(o)];
      for (int c = 0; c < C; ++c) s += double(x[size_t(n) * C + c]) * W[size_t(c) * OC + o];
      ref[size_t(n) * OC + o] = s;
      gref[size_t(n) * OC + o] = gelu_ref(s);
    }
  CHECK(max_abs_diff(out, ref) < 1e-5);
  CHECK(max_abs_diff(g, gref) < 1e-5);

  // backward with the GELU folded into dinp: dinp = (dout W^T) * gelu'(pre)
  const auto dout = randn(size_t(N) * OC, 8), pre = randn(size_t(N) * C, 9);
  std::vector<float> dinp(size_t(N) * C), dW(size_t(C) * OC, 1.0f), db(OC, 1.0f);
  dev.linear_backward(dinp.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), pre.data(), N, C, OC);
  std::vector<double> rdinp(dinp.size()), rdW(dW.size(), 1.0), rdb(db.size(), 1.0);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int o = 0; o < OC; ++o) s += double(dout[size_t(n) * OC + o]) * W[size_t(c) * OC + o];
      const double p = pre[size_t(n) * C + c], h = 1e-5;
      rdinp[size_t(n) * C + c] = s * (gelu_ref(p + h) - gelu_ref(p - h)) / (2 * h);
    }
  for (int c = 0; c < C; ++c)
    for (int o = 0; o < OC; ++o)
      for (int n = 0; n < N; ++n) rdW[size_t(c) * OC + o] += double(x[size_t(n) * C + c]) * dout[size_t(n) * OC + o];
  for (int o = 0; o < OC; ++o)
    for (int n = 0; n < N; ++n) rdb[size_t(o)] += dout[size_t(n) * OC + o];
  CHECK(max_abs_diff(dinp, rdinp) < 1e-4);
  CHECK(max_abs_diff(dW, rdW) < 1e-4);  // accumulated onto the initial 1.0
  CHECK(max_abs_diff(db, rdb) < 1e-4);
}

TEST_CASE("layernorm forward and backward match the formulas") {
  const int N = 13, C = 37;  // C not a multiple of 8: exercises the masked tails
  CpuDevice dev(2);
  const auto x = randn(size_t(N) * C, 10, 3.0f), w = randn(C, 11), b = randn(C, 12), dout = randn(size_t(N) * C, 13);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  dev.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  std::vector<float> dx(x.size(), 0.5f), dw(C, 0.25f), db(C, -1.0f);
  dev.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  std::vector<double> rout(x.size()), rdx(x.size(), 0.5), rdw(C, 0.25), rdb(C, -1.0);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[size_t(n * C + c)];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[size_t(n * C + c)] - m) * (x[size_t(n * C + c)] - m);
    v /= C;
    const double s = 1 / std::sqrt(v + 1e-5);
    double a = 0, bb = 0;
    for (int c = 0; c < C; ++c) {
      const double xh = (x[size_t(n * C + c)] - m) * s, dn = double(dout[size_t(n * C + c)]) * w[size_t(c)];
      rout[size_t(n * C + c)] = xh * w[size_t(c)] + b[size_t(c)];
      a += dn;
      bb += dn * xh;
      rdw[size_t(c)] += double(dout[size_t(n * C + c)]) * xh;
      rdb[size_t(c)] += dout[size_t(n * C + c)];
    }
    for (int c = 0; c < C; ++c) {
      const double xh = (x[size_t(n * C + c)] - m) * s, dn = double(dout[size_t(n * C + c)]) * w[size_t(c)];
      rdx[size_t(n * C + c)] += s * (dn - a / C - xh * bb / C);
    }
  }
  CHECK(max_abs_diff(out, rout) < 1e-5);
  CHECK(max_abs_diff(dx, rdx) < 1e-5);
  CHECK(max_abs_diff(dw, rdw) < 1e-4);
  CHECK(max_abs_diff(db, rdb) < 1e-4);
}

TEST_CASE("attention keeps each token inside its document") {
  const int B = 2, T = 11, C = 12, NH = 3, hs = C / NH;
  CpuDevice dev(2);
  const auto qkv = randn(size_t(B) * T * 3 * C, 14);
  // row 0: documents [0, 4), [4, 9), [9, 11); row 1: one document
  std::vector<int32_t> start(size_t(B) * T);
  for (int t = 0; t < T; ++t) {
    start[size_t(t)] = t < 4 ? 0 : t < 9 ? 4 : 9;
    start[size_t(T + t)] = 0;
  }
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  dev.attention_forward(out.data(), att.data(), qkv.data(), start.data(), B, T, C, NH, {});
  std::vector<double> ref(out.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int s0 = start[size_t(b * T + t)];
        std::vector<double> w;
        double mx = -1e300, z = 0;
        for (int s = s0; s <= t; ++s) {
          double d = 0;
          for (int k = 0; k < hs; ++k) d += double(qkv[size_t((b * T + t) * 3 * C + h * hs + k)]) * qkv[size_t((b * T + s) * 3 * C + C + h * hs + k)];
          w.push_back(d / std::sqrt(double(hs)));
          mx = std::max(mx, w.back());
        }
        for (auto& v : w) z += (v = std::exp(v - mx));
        for (int k = 0; k < hs; ++k) {
          double acc = 0;
          for (int s = s0; s <= t; ++s) acc += w[size_t(s - s0)] / z * qkv[size_t((b * T + s) * 3 * C + 2 * C + h * hs + k)];
          ref[size_t((b * T + t) * C + h * hs + k)] = acc;
        }
      }
  CHECK(max_abs_diff(out, ref) < 1e-5);

  // Backward: dqkv is zero for keys/values outside each query's document, and a
  // finite-difference probe of one q, k and v element agrees.
  const auto dout = randn(out.size(), 15);
  std::vector<float> dqkv(qkv.size());
  dev.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(), B, T, C, NH, {});
  auto objective = [&](const std::vector<float>& q) {
    std::vector<float> o(out.size()), a(att.size());
    CpuDevice d1(1);
    d1.attention_forward(o.data(), a.data(), q.data(), start.data(), B, T, C, NH, {});
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += double(o[i]) * dout[i];
    return s;
  };
  for (size_t idx : {size_t((0 * T + 5) * 3 * C + 1), size_t((0 * T + 6) * 3 * C + C + 7), size_t((1 * T + 3) * 3 * C + 2 * C + 10)}) {
    auto q = qkv;
    const float h = 1e-2f;
    q[idx] += h;
    const double up = objective(q);
    q[idx] -= 2 * h;
    const double down = objective(q);
    CAPTURE(idx);
    CHECK(std::fabs((up - down) / (2 * h) - dqkv[idx]) < 2e-3 * (1 + std::fabs(dqkv[idx])));
  }
}

TEST_CASE("cross-entropy skips masked rows and never predicts padded columns") {
  const int N = 6, V = 21, ld = 32;
  CpuDevice dev(2);
  auto logits = randn(size_t(N) * ld, 16, 2.0f);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < ld; ++j) logits[size_t(n * ld + j)] = 100.0f;  // padding: must be ignored
  const std::vector<int32_t> targets = {3, 0, 20, 7, 999, 5};
  const std::vector<float> mask = {1, 1, 1, 1, 0, 1};
  std::vector<float> losses(N), lse(N);
  dev.crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask.data(), N, V, ld);
  for (int n = 0; n < N; ++n) {
    double mx = -1e300, z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(logits[size_t(n * ld + j)]));
    for (int j = 0; j < V; ++j) z += std::exp(logits[size_t(n * ld + j)] - mx);
    const double want = mask[size_t(n)] ? mx + std::log(z) - logits[size_t(n * ld + targets[size_t(n)])] : 0.0;
    CHECK(losses[size_t(n)] == doctest::Approx(want).epsilon(1e-6));
  }
  std::vector<float> d(logits.size());
  dev.crossentropy_backward(d.data(), logits.data(), lse.data(), targets.data(), mask.data(), 0.25f, N, V, ld);
  for (int n = 0; n < N; ++n) {
    double row = 0;
    for (int j = 0; j < ld; ++j) {
      if (j >= V || !mask[size_t(n)]) CHECK(d[size_t(n * ld + j)] == 0.0f);
      row += d[size_t(n * ld + j)];
    }
    CHECK(std::fabs(row) < 1e-6);  // softmax - onehot sums to zero
  }
  // d/dlogit of the loss: 0.25 * (softmax - onehot)
  const double p3 = std::exp(double(logits[3]) - lse[0]);
  CHECK(d[3] == doctest::Approx(0.25 * (p3 - 1)).epsilon(1e-5));
}

TEST_CASE("embedding forward and backward, with repeated tokens") {
  const int N = 9, C = 20;
  CpuDevice dev(2);
  const auto wte = randn(10 * C, 17), wpe = randn(5 * C, 18), dout = randn(size_t(N) * C, 19);
  const std::vector<int32_t> tok = {1, 3, 1, 1, 9, 0, 3, 2, 1}, pos = {0, 1, 2, 0, 1, 2, 3, 4, 0};
  std::vector<float> out(size_t(N) * C);
  dev.embedding_forward(out.data(), tok.data(), pos.data(), wte.data(), wpe.data(), N, C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) CHECK(out[size_t(n * C + c)] == wte[size_t(tok[size_t(n)] * C + c)] + wpe[size_t(pos[size_t(n)] * C + c)]);
  std::vector<float> dwte(10 * C), dwpe(5 * C);
  dev.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), pos.data(), N, C);
  for (int c = 0; c < C; ++c) {
    // token 1 appears at n = 0, 2, 3, 8 (added in that order)
    const float want = ((dout[size_t(0 * C + c)] + dout[size_t(2 * C + c)]) + dout[size_t(3 * C + c)]) + dout[size_t(8 * C + c)];
    CHECK(dwte[size_t(1 * C + c)] == want);
    CHECK(dwte[size_t(4 * C + c)] == 0.0f);
  }
}

TEST_CASE("gelu, add, scale and sum of squares") {
  CpuDevice dev(2);
  const auto x = randn(10001, 20, 3.0f);
  std::vector<float> y(x.size()), dy(x.size());
  dev.gelu_forward(y.data(), x.data(), int64_t(x.size()));
  const auto g = randn(x.size(), 21);
  dev.gelu_backward(dy.data(), x.data(), g.data(), int64_t(x.size()));
  double worst = 0, worst_d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(y[i] - gelu_ref(x[i])));
    const double h = 1e-5, d = (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
    worst_d = std::max(worst_d, std::fabs(dy[i] - g[i] * d));
  }
  CHECK(worst < 2e-6);
  CHECK(worst_d < 2e-5);

  std::vector<float> s(x.size());
  dev.add(s.data(), x.data(), g.data(), int64_t(x.size()));
  CHECK(s[777] == x[777] + g[777]);
  dev.scale(s.data(), int64_t(s.size()), 0.5f);
  CHECK(s[10000] == (x[10000] + g[10000]) * 0.5f);

  // Squares of floats are exact in double; the partials add up in block order.
  std::vector<float> ones(200000, 0.5f);
  CHECK(dev.sum_squares(ones.data(), int64_t(ones.size())) == 50000.0);
  ones[12345] = NAN;
  CHECK(std::isnan(dev.sum_squares(ones.data(), int64_t(ones.size()))));
}

TEST_CASE("every kernel but gemm gives the same bits for 1 and 3 threads") {
  CpuDevice one(1), three(3);
  const int B = 2, T = 33, C = 48, NH = 4, N = B * T;
  const auto x = randn(size_t(N) * C, 22), w = randn(C, 23), b = randn(C, 24), dout = randn(size_t(N) * C, 25);
  const auto qkv = randn(size_t(N) * 3 * C, 26);
  std::vector<int32_t> start(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) start[size_t(i)] = (i % T) < 10 ? 0 : 10;
  auto run = [&](CpuDevice& dev) {
    std::vector<float> out(x.size()), mean(N), rstd(N), dx(x.size()), dw(C), db(C);
    dev.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    dev.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    std::vector<float> ao(size_t(N) * C), att(size_t(B) * NH * T * T), dqkv(qkv.size());
    dev.attention_forward(ao.data(), att.data(), qkv.data(), start.data(), B, T, C, NH, {});
    dev.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), start.data(), B, T, C, NH, {});
    std::vector<float> bias(C);
    troupe::kernels::cpu::bias_backward(dev.pool(), bias.data(), dout.data(), N, C);
    std::vector<float> all;
    for (const auto* v : {&out, &mean, &rstd, &dx, &dw, &db, &ao, &dqkv, &bias}) all.insert(all.end(), v->begin(), v->end());
    all.push_back(float(dev.sum_squares(x.data(), int64_t(x.size()))));
    return all;
  };
  const auto a = run(one), c = run(three);
  REQUIRE(a.size() == c.size());
  CHECK(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("AdamW kernel: decoupled decay and bias correction, element by element") {
  CpuDevice dev(1);
  std::vector<float> p = {0.5f, -1.0f, 2.0f}, g = {1.0f, 0.0f, -4.0f}, m(3), v(3);
  AdamWArgs a;
  a.lr = 0.01f;
  a.weight_decay = 0.1f;
  a.bias_correction1 = 1 - 0.9f;
  a.bias_correction2 = 1 - 0.95f;
  dev.adamw_update(p.data(), g.data(), m.data(), v.data(), 3, a);
  // step 1: mhat = g, vhat = g^2, so the update direction is g / (|g| + eps)
  CHECK(p[0] == doctest::Approx(0.5 * (1 - 0.001) - 0.01).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(-1.0 * (1 - 0.001)).epsilon(1e-7));
  CHECK(p[2] == doctest::Approx(2.0 * (1 - 0.001) + 0.01).epsilon(1e-6));
  CHECK(m[2] == doctest::Approx(-0.4f));
  CHECK(v[2] == doctest::Approx(0.8f));
}

TEST_CASE("devices on different threads at once give the same bits as one at a time") {
  const int M = 128, N = 96, K = 200;
  const auto A = randn(size_t(M) * K, 30), B = randn(size_t(K) * N, 31);
  auto work = [&](std::vector<float>& C) {
    CpuDevice dev(1);
    for (int rep = 0; rep < 20; ++rep) dev.gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, rep ? 1.0f : 0.0f, C.data(), N);
  };
  std::vector<float> alone(size_t(M) * N);
  work(alone);
  std::vector<std::vector<float>> outs(4, std::vector<float>(size_t(M) * N));
  std::vector<std::thread> ts;
  for (auto& o : outs) ts.emplace_back([&] { work(o); });
  for (auto& t : ts) t.join();
  for (const auto& o : outs) CHECK(std::memcmp(o.data(), alone.data(), o.size() * sizeof(float)) == 0);
}
