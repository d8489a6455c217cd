// Each layer of model/layers on its own: forward against an independent
// double-precision loop, backward against central differences of that loop (in
// double, so the differences are exact to ~1e-9 and the tolerance covers the fp32
// layer only); and the column- / row-parallel linears at TP = 2, with and without
// sequence parallelism, against the same helpers at TP = 1.
//
// Tolerances: forward 2e-5 absolute on values of order 1; gradients 2e-4 relative
// to the largest gradient of the tensor (fp32 GEMMs over widths <= 32).
#include <doctest/doctest.h>

#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "test/support/on_ranks.h"
#include "test/support/randn.h"
#include "comm/inprocess.h"
#include "kernels/cpu/cpu_device.h"
#include "model/layers/attention.h"
#include "model/layers/embedding.h"
#include "model/layers/head.h"
#include "model/layers/loss.h"
#include "model/layers/mlp.h"
#include "model/layers/norm.h"
#include "model/layers/parallel_linear.h"

using namespace troupe;
using namespace troupe::model::layers;
using kernels::Buffer;
using Vec = std::vector<double>;

using troupe::testing::max_abs_diff;
using troupe::testing::on_ranks;
using troupe::testing::randn;

namespace {

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// Device buffers of one test: uploaded from host vectors, read back as vectors.
struct Bench {
  kernels::cpu::CpuDevice dev{1};
  std::vector<Buffer> held;
  float* up(const std::vector<float>& v) {
    held.push_back(dev.allocate(int64_t(v.size()), kernels::DType::kF32));
    dev.copy_from_host(held.back().f32(), v.data(), v.size() * sizeof(float));
    return held.back().f32();
  }
  float* zeros(int64_t n) {
    held.push_back(dev.allocate(n, kernels::DType::kF32));
    return held.back().f32();
  }
  int32_t* ints(const std::vector<int32_t>& v) {
    held.push_back(dev.allocate(int64_t(v.size()), kernels::DType::kI32));
    dev.copy_from_host(held.back().i32(), v.data(), v.size() * sizeof(int32_t));
    return held.back().i32();
  }
  std::vector<float> down(const float* p, size_t n) { return kernels::download(dev, p, n); }
  // A parameter: its values uploaded, a zero gradient beside them.
  Weight weight(const std::vector<float>& v) { return {up(v), zeros(int64_t(v.size()))}; }
};

// Gradients of sum(f(args) * r) with respect to each argument, by central differences.
using Fn = std::function<Vec(const std::vector<Vec>&)>;
std::vector<Vec> numeric_grads(const Fn& f, std::vector<Vec> args, const Vec& r, double h = 1e-5) {
  auto dot = [&](const Vec& out) {
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
    return s;
  };
  std::vector<Vec> g(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    g[a].resize(args[a].size());
    for (size_t i = 0; i < args[a].size(); ++i) {
      const double keep = args[a][i];
      args[a][i] = keep + h;
      const double up = dot(f(args));
      args[a][i] = keep - h;
      const double down = dot(f(args));
      args[a][i] = keep;
      g[a][i] = (up - down) / (2 * h);
    }
  }
  return g;
}

void check_close(const std::vector<float>& got, const Vec& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  INFO(what << ": max |difference| " << worst);
  CHECK(worst <= tol);
}

// Gradients: relative to the tensor's largest entry.
void check_grad(const std::vector<float>& got, const Vec& want, const char* what) {
  double scale = 1e-3;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  check_close(got, want, 2e-4 * scale, what);
}

Vec matmul(const Vec& a, const Vec& b, int N, int K, int M) {  // [N, K] [K, M]
  Vec c(size_t(N) * M, 0.0);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int m = 0; m < M; ++m) c[size_t(n) * M + m] += a[size_t(n) * K + k] * b[size_t(k) * M + m];
  return c;
}

double gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

TEST_CASE("LayerNorm forward and backward against a double reference") {
  const int N = 5, D = 12;
  const float eps = 1e-5f;
  Bench b;
  const auto x = randn(size_t(N) * D, 1), scale = randn(D, 2, 0.5f), shift = randn(D, 3, 0.5f);
  const auto r = randn(size_t(N) * D, 4);
  auto ref = [&](const std::vector<Vec>& a) {
    Vec out(size_t(N) * D);
    for (int n = 0; n < N; ++n) {
      double mean = 0, var = 0;
      for (int d = 0; d < D; ++d) mean += a[0][size_t(n) * D + d] / D;
      for (int d = 0; d < D; ++d) var += std::pow(a[0][size_t(n) * D + d] - mean, 2) / D;
      const double rstd = 1 / std::sqrt(var + eps);
      for (int d = 0; d < D; ++d)
        out[size_t(n) * D + d] = (a[0][size_t(n) * D + d] - mean) * rstd * a[1][size_t(d)] + a[2][size_t(d)];
    }
    return out;
  };
  const NormWeights w{b.weight(scale), b.weight(shift)};
  auto norm = make_norm({NormKind::kLayerNorm, D, eps}, w, b.dev, N);
  float* saved = b.zeros(norm->saved_floats());
  float* xd = b.up(x);
  float* out = b.zeros(int64_t(N) * D);
  norm->forward(saved, out, xd, N);
  const std::vector<Vec> args{to_double(x), to_double(scale), to_double(shift)};
  check_close(b.down(out, size_t(N) * D), ref(args), 2e-5, "out");

  float* dx = b.up(std::vector<float>(size_t(N) * D, 0.5f));  // backward adds into dx
  norm->backward(saved, dx, b.up(r), xd, N);
  const auto g = numeric_grads(ref, args, to_double(r));
  Vec dx_want = g[0];
  for (double& v : dx_want) v += 0.5;
  check_grad(b.down(dx, size_t(N) * D), dx_want, "dx");
  check_grad(b.down(w.scale.grad, D), g[1], "d scale");
  check_grad(b.down(w.shift.grad, D), g[2], "d shift");

  std::vector<TpContext::Span> spans;
  norm->row_sharded_grads(spans);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].grad == w.scale.grad);
  CHECK(spans[1].n == D);
}

TEST_CASE("RMSNorm forward and backward against a double reference") {
  const int N = 4, D = 13;
  const float eps = 1e-5f;
  Bench b;
  const auto x = randn(size_t(N) * D, 5), scale = randn(D, 6, 0.5f), r = randn(size_t(N) * D, 7);
  auto ref = [&](const std::vector<Vec>& a) {
    Vec out(size_t(N) * D);
    for (int n = 0; n < N; ++n) {
      double ms = 0;
      for (int d = 0; d < D; ++d) ms += a[0][size_t(n) * D + d] * a[0][size_t(n) * D + d] / D;
      for (int d = 0; d < D; ++d)
        out[size_t(n) * D + d] = a[0][size_t(n) * D + d] / std::sqrt(ms + eps) * a[1][size_t(d)];
    }
    return out;
  };
  const NormWeights w{b.weight(scale), {}};
  auto norm = make_norm({NormKind::kRmsNorm, D, eps}, w, b.dev, N);
  CHECK(norm->saved_floats() == N);
  float* saved = b.zeros(norm->saved_floats());
  float* xd = b.up(x);
  float* out = b.zeros(int64_t(N) * D);
  norm->forward(saved, out, xd, N);
  const std::vector<Vec> args{to_double(x), to_double(scale)};
  check_close(b.down(out, size_t(N) * D), ref(args), 2e-5, "out");
  float* dx = b.zeros(int64_t(N) * D);
  norm->backward(saved, dx, b.up(r), xd, N);
  const auto g = numeric_grads(ref, args, to_double(r));
  check_grad(b.down(dx, size_t(N) * D), g[0], "dx");
  check_grad(b.down(w.scale.grad, D), g[1], "d scale");
  std::vector<TpContext::Span> spans;
  norm->row_sharded_grads(spans);
  CHECK(spans.size() == 1);
  CHECK_THROWS_AS(make_norm({NormKind::kRmsNorm, D, eps}, {b.weight(scale), b.weight(scale)}, b.dev, N),
                  std::invalid_argument);
}

TEST_CASE("multi-head attention within documents against a double reference") {
  const int B = 2, T = 5, D = 8, NH = 2, N = B * T, hs = D / NH;
  Bench b;
  TpContext tp(b.dev, {}, N);
  // Row 0 one document; row 1 two (the second starts at position 2).
  const std::vector<int32_t> doc_start{0, 0, 0, 0, 0, 0, 0, 2, 2, 2};
  const auto x = randn(size_t(N) * D, 10), res = randn(size_t(N) * D, 11);
  const auto wq = randn(size_t(D) * 3 * D, 12, 0.3f), bq = randn(3 * D, 13, 0.1f);
  const auto wp = randn(size_t(D) * D, 14, 0.3f), bp = randn(D, 15, 0.1f);
  const auto r = randn(size_t(N) * D, 16);
  // args: x, W_qkv, b_qkv, W_proj, b_proj (the residual passes through unchanged).
  auto ref = [&](const std::vector<Vec>& a) {
    Vec qkv = matmul(a[0], a[1], N, D, 3 * D);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < 3 * D; ++j) qkv[size_t(n) * 3 * D + j] += a[2][size_t(j)];
    Vec y(size_t(N) * D, 0.0);
    for (int bb = 0; bb < B; ++bb)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const int n = bb * T + t, s0 = doc_start[size_t(n)];
          Vec p(size_t(T), 0.0);
          double mx = -1e300, z = 0;
          for (int s = s0; s <= t; ++s) {
            double dot = 0;
            for (int i = 0; i < hs; ++i)
              dot += qkv[size_t(n) * 3 * D + h * hs + i] * qkv[size_t(bb * T + s) * 3 * D + D + h * hs + i];
            p[size_t(s)] = dot / std::sqrt(double(hs));
            mx = std::max(mx, p[size_t(s)]);
          }
          for (int s = s0; s <= t; ++s) z += (p[size_t(s)] = std::exp(p[size_t(s)] - mx));
          for (int s = s0; s <= t; ++s)
            for (int i = 0; i < hs; ++i)
              y[size_t(n) * D + h * hs + i] += p[size_t(s)] / z * qkv[size_t(bb * T + s) * 3 * D + 2 * D + h * hs + i];
        }
    Vec out = matmul(y, a[3], N, D, D);
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) out[size_t(n) * D + d] += a[4][size_t(d)] + res[size_t(n) * D + d];
    return out;
  };
  const AttentionWeights w{b.weight(wq), b.weight(bq), b.weight(wp), b.weight(bp)};
  auto attn = make_attention({AttentionKind::kMultiHead, D, NH}, w, tp, {B, T});
  CHECK(attn->scratch_width() == 3 * D);
  float* saved = b.zeros(attn->saved_floats());
  const Workspace ws{b.zeros(int64_t(N) * D), b.zeros(int64_t(N) * attn->scratch_width())};
  float* xd = b.up(x);
  float* out = b.zeros(int64_t(N) * D);
  const Sequence seq{b.ints(doc_start), nullptr, B, T};
  attn->forward(saved, out, xd, b.up(res), seq, ws);
  const std::vector<Vec> args{to_double(x), to_double(wq), to_double(bq), to_double(wp), to_double(bp)};
  check_close(b.down(out, size_t(N) * D), ref(args), 2e-5, "out");

  const float* dx = attn->backward(saved, b.up(r), xd, seq, ws);
  const auto g = numeric_grads(ref, args, to_double(r));
  check_grad(b.down(dx, size_t(N) * D), g[0], "dx");
  check_grad(b.down(w.qkv_w.grad, wq.size()), g[1], "d W_qkv");
  check_grad(b.down(w.qkv_b.grad, bq.size()), g[2], "d b_qkv");
  check_grad(b.down(w.proj_w.grad, wp.size()), g[3], "d W_proj");
  check_grad(b.down(w.proj_b.grad, bp.size()), g[4], "d b_proj");
}

TEST_CASE("GELU MLP against a double reference") {
  const int N = 6, D = 8, F = 32;
  Bench b;
  TpContext tp(b.dev, {}, N);
  const auto x = randn(size_t(N) * D, 20), res = randn(size_t(N) * D, 21);
  const auto w1 = randn(size_t(D) * F, 22, 0.3f), b1 = randn(F, 23, 0.1f);
  const auto w2 = randn(size_t(F) * D, 24, 0.3f), b2 = randn(D, 25, 0.1f);
  const auto r = randn(size_t(N) * D, 26);
  auto ref = [&](const std::vector<Vec>& a) {
    Vec h = matmul(a[0], a[1], N, D, F);
    for (int n = 0; n < N; ++n)
      for (int f = 0; f < F; ++f) h[size_t(n) * F + f] = gelu(h[size_t(n) * F + f] + a[2][size_t(f)]);
    Vec out = matmul(h, a[3], N, F, D);
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) out[size_t(n) * D + d] += a[4][size_t(d)] + res[size_t(n) * D + d];
    return out;
  };
  const MlpWeights w{b.weight(w1), b.weight(b1), b.weight(w2), b.weight(b2)};
  auto mlp = make_mlp({MlpKind::kGelu, D, F}, w, tp, {1, N});
  float* saved = b.zeros(mlp->saved_floats());
  const Workspace ws{b.zeros(int64_t(N) * D), b.zeros(int64_t(N) * mlp->scratch_width())};
  float* xd = b.up(x);
  float* out = b.zeros(int64_t(N) * D);
  const Sequence seq{nullptr, nullptr, 1, N};
  mlp->forward(saved, out, xd, b.up(res), seq, ws);
  const std::vector<Vec> args{to_double(x), to_double(w1), to_double(b1), to_double(w2), to_double(b2)};
  check_close(b.down(out, size_t(N) * D), ref(args), 2e-5, "out");

  const float* dx = mlp->backward(saved, b.up(r), xd, seq, ws);
  const auto g = numeric_grads(ref, args, to_double(r));
  check_grad(b.down(dx, size_t(N) * D), g[0], "dx");
  check_grad(b.down(w.fc_w.grad, w1.size()), g[1], "d W_fc");
  check_grad(b.down(w.fc_b.grad, b1.size()), g[2], "d b_fc");
  check_grad(b.down(w.proj_w.grad, w2.size()), g[3], "d W_proj");
  check_grad(b.down(w.proj_b.grad, b2.size()), g[4], "d b_proj");
}

TEST_CASE("embedding with learned positions and without") {
  const int N = 7, D = 6, Vp = 10, P = 5;
  const std::vector<int32_t> tokens{3, 1, 3, 0, 6, 3, 1}, positions{0, 1, 2, 3, 4, 0, 1};
  for (const bool learned : {true, false}) {
    CAPTURE(learned);
    Bench b;
    TpContext tp(b.dev, {}, N);
    const auto wte = randn(size_t(Vp) * D, 30), wpe = randn(size_t(P) * D, 31);
    const EmbeddingWeights w{b.weight(wte), learned ? b.weight(wpe) : Weight{}};
    Embedding emb({D, learned ? Positions::kLearned : Positions::kNone, {0, Vp, 7}}, w, tp);
    const int32_t* tok = b.ints(tokens);
    const int32_t* pos = b.ints(positions);
    float* out = b.zeros(int64_t(N) * D);
    const Sequence seq{nullptr, pos, 1, N};
    emb.forward(out, tok, seq, nullptr);
    Vec want(size_t(N) * D), dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
    const auto dout = randn(size_t(N) * D, 32);
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) {
        const size_t i = size_t(n) * D + d, t = size_t(tokens[size_t(n)]) * D + d,
                     p = size_t(positions[size_t(n)]) * D + d;
        want[i] = double(wte[t]) + (learned ? double(wpe[p]) : 0.0);
        dwte[t] += dout[i];
        dwpe[p] += dout[i];
      }
    check_close(b.down(out, want.size()), want, 1e-6, "out");
    emb.backward(b.up(dout), tok, seq);
    check_close(b.down(w.wte.grad, wte.size()), dwte, 1e-5, "d wte");
    if (learned) check_close(b.down(w.wpe.grad, wpe.size()), dwpe, 1e-5, "d wpe");
  }
  Bench b;
  TpContext tp(b.dev, {}, N);
  CHECK_THROWS_AS(Embedding({D, Positions::kNone, {0, Vp, 7}}, {b.weight(randn(size_t(Vp) * D, 1)),
                                                                 b.weight(randn(size_t(P) * D, 2))}, tp),
                  std::invalid_argument);
}

TEST_CASE("head and loss over a padded vocabulary against a double reference") {
  const int N = 6, D = 8, Vp = 12, V = 10;
  Bench b;
  TpContext tp(b.dev, {}, N);
  const std::vector<int32_t> targets{1, 9, 0, 4, 4, 0};
  const std::vector<float> mask{1, 1, 0, 1, 1, 1};
  const float scale = 1.0f / 5;
  auto x = randn(size_t(N) * D, 40);
  auto w = randn(size_t(Vp) * D, 41, 0.5f);
  for (size_t i = size_t(V) * D; i < w.size(); ++i) w[i] = 0;  // padding rows
  // scale * sum_n mask_n (lse_n - logit_n[target]) over the V real columns (r = {1}).
  auto ref = [&](const std::vector<Vec>& a) {
    double total = 0;
    for (int n = 0; n < N; ++n) {
      if (mask[size_t(n)] == 0) continue;
      Vec logit(size_t(V), 0.0);
      double mx = -1e300, z = 0;
      for (int v = 0; v < V; ++v) {
        for (int d = 0; d < D; ++d) logit[size_t(v)] += a[0][size_t(n) * D + d] * a[1][size_t(v) * D + d];
        mx = std::max(mx, logit[size_t(v)]);
      }
      for (int v = 0; v < V; ++v) z += std::exp(logit[size_t(v)] - mx);
      total += mx + std::log(z) - logit[size_t(targets[size_t(n)])];
    }
    return Vec{scale * total};
  };
  const Weight wd = b.weight(w);
  Head head({D, {0, Vp, V}}, wd, tp);
  Loss loss({{0, Vp, V}}, tp);
  CHECK(head.ld() == Vp);
  float* xd = b.up(x);
  float* logits = b.zeros(int64_t(N) * Vp);
  float* losses = b.zeros(N);
  float* lse = b.zeros(N);
  const int32_t* tg = b.ints(targets);
  float* md = b.up(mask);
  const Workspace ws{b.zeros(int64_t(N) * D), b.zeros(int64_t(N) * loss.scratch_width())};
  head.forward(logits, xd, N);
  loss.forward(losses, lse, logits, tg, md, N, ws);
  const std::vector<Vec> args{to_double(x), to_double(w)};
  double sum = 0;
  for (float l : b.down(losses, N)) sum += l;
  CHECK(std::fabs(scale * sum - ref(args)[0]) < 2e-5);

  loss.backward(logits, logits, lse, tg, md, scale, N);
  const float* dx = head.backward(b.zeros(int64_t(N) * D), logits, xd, N);
  const auto g = numeric_grads(ref, args, Vec{1.0});
  check_grad(b.down(dx, x.size()), g[0], "dx");
  check_grad(b.down(wd.grad, w.size()), g[1], "d W (padding rows zero)");
}

// A column-parallel GELU expansion followed by a row-parallel projection (the MLP's
// shape), and the column-parallel QKV pieces, at TP = 2 (each rank holding its
// slices) against TP = 1: outputs, input gradients and weight gradients.
TEST_CASE("column- and row-parallel linears at TP2, with and without SP, against TP1") {
  const int N = 8, K = 8, F = 16, T = 2, Ft = F / T, Kp = K / T;
  const auto x = randn(size_t(N) * K, 50), res = randn(size_t(N) * K, 51), dout = randn(size_t(N) * K, 52);
  const auto w1 = randn(size_t(K) * F, 53, 0.3f), b1 = randn(F, 54, 0.1f);
  const auto w2 = randn(size_t(F) * K, 55, 0.3f), b2 = randn(K, 56, 0.1f);
  const auto wq = randn(size_t(K) * 3 * K, 57, 0.3f), bq = randn(3 * K, 58, 0.1f);
  const auto dqkv = randn(size_t(N) * 3 * K, 59);

  struct Result {
    std::vector<float> out, dx, dw1, db1, dw2, db2, qkv, dxq, dwq, dbq;
  };
  // Rank t of T: its columns of w1 / b1 / each q, k, v block of wq, its rows of w2.
  auto run = [&](int t, int size, bool sp, std::shared_ptr<comm::Communicator> group) {
    Bench b;
    TpContext tp(b.dev, {group, sp}, N);
    const int ft = F / size, kp = K / size;
    std::vector<float> w1s, b1s, w2s(w2.begin() + ptrdiff_t(t) * ft * K, w2.begin() + ptrdiff_t(t + 1) * ft * K);
    for (int k = 0; k < K; ++k)
      for (int f = 0; f < ft; ++f) w1s.push_back(w1[size_t(k) * F + t * ft + f]);
    for (int f = 0; f < ft; ++f) b1s.push_back(b1[size_t(t * ft + f)]);
    std::vector<float> wqs, bqs;  // size 1: the whole [K, 3K]; else three [K, kp] pieces
    if (size == 1) {
      wqs = wq;
      bqs = bq;
    } else {
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < K; ++k)
          for (int c = 0; c < kp; ++c) wqs.push_back(wq[size_t(k) * 3 * K + j * K + t * kp + c]);
      for (int j = 0; j < 3; ++j)
        for (int c = 0; c < kp; ++c) bqs.push_back(bq[size_t(j * K + t * kp + c)]);
    }
    const Weight W1 = b.weight(w1s), B1 = b.weight(b1s), W2 = b.weight(w2s), B2 = b.weight(b2);
    const Weight WQ = b.weight(wqs), BQ = b.weight(bqs);
    const int64_t rows = tp.rows(N), r0 = tp.first_row(N);
    // This rank's rows of the inputs that live on the residual stream.
    auto mine = [&](const std::vector<float>& v) {
      std::vector<float> full(v.size(), 0.0f);
      std::copy(v.begin() + r0 * K, v.begin() + (r0 + rows) * K, full.begin() + r0 * K);
      return full;
    };
    float* xin = b.up(mine(x));
    float* h = b.zeros(int64_t(N) * ft);
    float* g = b.zeros(int64_t(N) * ft);
    column_parallel_forward(tp, h, g, xin, W1, B1, N, K, ft);
    float* out = b.zeros(int64_t(N) * K);
    float* partial = b.zeros(int64_t(N) * K);
    row_parallel_forward(tp, out, g, W2, B2, b.up(std::vector<float>(res.begin() + r0 * K, res.end())), N, ft, K,
                         partial);
    float* dres = b.up(mine(dout));
    float* dh = b.zeros(int64_t(N) * ft);
    row_parallel_backward(tp, dh, dres, g, W2, B2, h, N, ft, K);
    const float* dx = column_parallel_backward(tp, b.zeros(int64_t(N) * K), dh, xin, W1, B1, N, K, ft);
    Result r;
    r.out = b.down(out, size_t(rows) * K);
    r.dx = b.down(dx, size_t(rows) * K);
    r.dw1 = b.down(W1.grad, w1s.size());
    r.db1 = b.down(B1.grad, b1s.size());
    r.dw2 = b.down(W2.grad, w2s.size());
    r.db2 = b.down(B2.grad, K);

    float* xq = b.up(mine(x));
    float* qkv = b.zeros(int64_t(N) * 3 * kp);
    column_parallel_qkv_forward(tp, qkv, xq, WQ, BQ, N, K, kp);
    std::vector<float> dq;  // this rank's q | k | v columns of dqkv
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < 3; ++j)
        for (int c = 0; c < kp; ++c) dq.push_back(dqkv[size_t(n) * 3 * K + j * K + t * kp + c]);
    const float* dxq = column_parallel_qkv_backward(tp, b.zeros(int64_t(N) * K), b.up(dq), xq, WQ, BQ, N, K, kp);
    r.qkv = b.down(qkv, size_t(N) * 3 * kp);
    r.dxq = b.down(dxq, size_t(rows) * K);
    r.dwq = b.down(WQ.grad, wqs.size());
    r.dbq = b.down(BQ.grad, bqs.size());
    return r;
  };
  const Result one = run(0, 1, false, nullptr);
  auto close = [](const std::vector<float>& got, const std::vector<float>& want, size_t at, const char* what) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[at + i]));
    INFO(what << ": max |difference| " << worst);
    CHECK(worst <= 1e-5);
  };
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    auto group = comm::make_inprocess_group(T, "layers-test", std::chrono::milliseconds(20000));
    std::vector<Result> ranks(T);
    on_ranks(T, [&](int t) { ranks[size_t(t)] = run(t, T, sp, group[size_t(t)]); });
    for (int t = 0; t < T; ++t) {
      CAPTURE(t);
      const Result& r = ranks[size_t(t)];
      const size_t row0 = sp ? size_t(t) * (N / T) * K : 0;
      close(r.out, one.out, row0, "out");
      close(r.dx, one.dx, row0, "dx");
      close(r.dxq, one.dxq, row0, "dx of the QKV projection");
      std::vector<float> dw1(r.dw1.size()), db1(r.db1.size());
      for (int k = 0; k < K; ++k)
        for (int f = 0; f < Ft; ++f) dw1[size_t(k) * Ft + f] = one.dw1[size_t(k) * F + t * Ft + f];
      for (int f = 0; f < Ft; ++f) db1[size_t(f)] = one.db1[size_t(t * Ft + f)];
      close(r.dw1, dw1, 0, "d w1 (columns)");
      close(r.db1, db1, 0, "d b1");
      close(r.dw2, one.dw2, size_t(t) * Ft * K, "d w2 (rows)");
      close(r.db2, one.db2, 0, "d b2 (replicated)");
      std::vector<float> qkv, dwq, dbq;
      for (int n = 0; n < N; ++n)
        for (int j = 0; j < 3; ++j)
          for (int c = 0; c < Kp; ++c) qkv.push_back(one.qkv[size_t(n) * 3 * K + j * K + t * Kp + c]);
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < K; ++k)
          for (int c = 0; c < Kp; ++c) dwq.push_back(one.dwq[size_t(k) * 3 * K + j * K + t * Kp + c]);
      for (int j = 0; j < 3; ++j)
        for (int c = 0; c < Kp; ++c) dbq.push_back(one.dbq[size_t(j * K + t * Kp + c)]);
      close(r.qkv, qkv, 0, "qkv (q | k | v pieces)");
      close(r.dwq, dwq, 0, "d W_qkv pieces");
      close(r.dbq, dbq, 0, "d b_qkv pieces");
    }
  }
}
