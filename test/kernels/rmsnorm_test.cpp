// RMSNorm (kernels/cpu/rmsnorm.cpp) against a double-precision loop, and the same
// bits for 1 and 3 threads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/kernels.h"
#include "test/support/randn.h"

using troupe::kernels::cpu::CpuDevice;

using troupe::testing::max_abs_diff;
using troupe::testing::randn;

namespace {

}  // namespace

TEST_CASE("rmsnorm forward and backward match the formulas") {
  const int N = 13, C = 37;  // C not a multiple of 8: exercises the masked tails
  const float eps = 1e-5f;
  CpuDevice dev(2);
  const auto x = randn(size_t(N) * C, 60, 3.0f), w = randn(C, 61), dout = randn(size_t(N) * C, 62);
  std::vector<float> out(x.size()), rstd(N);
  troupe::kernels::cpu::rmsnorm_forward(dev.pool(), out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  std::vector<float> dx(x.size(), 0.5f), dw(C, 0.25f);  // both accumulate
  troupe::kernels::cpu::rmsnorm_backward(dev.pool(), dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                                         rstd.data(), N, C);
  std::vector<double> rout(x.size()), rrstd(N), rdx(x.size(), 0.5), rdw(C, 0.25);
  for (int n = 0; n < N; ++n) {
    const size_t row = size_t(n) * C;
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x[row + c]) * x[row + c];
    const double s = 1 / std::sqrt(ms / C + eps);
    rrstd[size_t(n)] = s;
    // y = x s w; dy/dx_j = s w_j - x_j s^3 / C sum_i dout_i w_i x_i
    double dot = 0;
    for (int c = 0; c < C; ++c) dot += double(dout[row + c]) * w[size_t(c)] * x[row + c];
    for (int c = 0; c < C; ++c) {
      rout[row + c] = x[row + c] * s * w[size_t(c)];
      rdx[row + c] += s * double(dout[row + c]) * w[size_t(c)] - double(x[row + c]) * s * s * s / C * dot;
      rdw[size_t(c)] += double(dout[row + c]) * x[row + c] * s;
    }
  }
  CHECK(max_abs_diff(out, rout) < 1e-5);
  CHECK(max_abs_diff(rstd, rrstd) < 1e-6);
  CHECK(max_abs_diff(dx, rdx) < 1e-5);
  CHECK(max_abs_diff(dw, rdw) < 1e-4);
}

TEST_CASE("rmsnorm backward by central differences of the double formula") {
  // The closed form above checked against the definition itself.
  const int C = 11;
  const float eps = 1e-5f;
  CpuDevice dev(1);
  const auto x = randn(C, 63), w = randn(C, 64), dout = randn(C, 65);
  std::vector<float> out(C), rstd(1), dx(C, 0.0f), dw(C, 0.0f);
  troupe::kernels::cpu::rmsnorm_forward(dev.pool(), out.data(), rstd.data(), x.data(), w.data(), 1, C, eps);
  troupe::kernels::cpu::rmsnorm_backward(dev.pool(), dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                                         rstd.data(), 1, C);
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
    double ms = 0;
    for (double v : xv) ms += v * v;
    const double s = 1 / std::sqrt(ms / C + eps);
    double l = 0;
    for (int c = 0; c < C; ++c) l += dout[size_t(c)] * xv[size_t(c)] * s * wv[size_t(c)];
    return l;
  };
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), gx(C), gw(C);
  const double h = 1e-6;
  for (int c = 0; c < C; ++c) {
    auto xp = xd, xm = xd, wp = wd, wm = wd;
    xp[size_t(c)] += h, xm[size_t(c)] -= h, wp[size_t(c)] += h, wm[size_t(c)] -= h;
    gx[size_t(c)] = (loss(xp, wd) - loss(xm, wd)) / (2 * h);
    gw[size_t(c)] = (loss(xd, wp) - loss(xd, wm)) / (2 * h);
  }
  CHECK(max_abs_diff(dx, gx) < 1e-5);
  CHECK(max_abs_diff(dw, gw) < 1e-5);
}

TEST_CASE("rmsnorm gives the same bits for 1 and 3 threads") {
  CpuDevice one(1), three(3);
  const int N = 66, C = 48;
  const auto x = randn(size_t(N) * C, 66), w = randn(C, 67), dout = randn(size_t(N) * C, 68);
  auto run = [&](CpuDevice& dev) {
    std::vector<float> out(x.size()), rstd(N), dx(x.size()), dw(C);
    troupe::kernels::cpu::rmsnorm_forward(dev.pool(), out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    troupe::kernels::cpu::rmsnorm_backward(dev.pool(), dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                                           rstd.data(), N, C);
    std::vector<float> all;
    for (const auto* v : {&out, &rstd, &dx, &dw}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto a = run(one), b = run(three);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
