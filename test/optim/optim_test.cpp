// AdamW, clipping, skipping and the reference trainer's schedule bookkeeping.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_device.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "engine/reference_trainer.h"
#include "sched/lr_schedule.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

const std::vector<model::DecaySpan> kOneDecay = {{0, 1, model::DecayGroup::kDecay}};

float one_step(float p, float g, double lr, double wd, double eps) {
  kernels::cpu::CpuDevice dev(1);
  optim::AdamW opt(dev, {0.9, 0.95, eps, wd}, kOneDecay, {0, 1});
  opt.step(&p, &g, lr, 1.0);
  return p;
}

}  // namespace

TEST_CASE("the seed's AdamW example: p = 0.5, u = 0.5, lr 8e-5, wd 0.1") {
  // Decay alone (zero gradient, so the Adam direction u is 0): 0.5 * (1 - 8e-5 * 0.1).
  CHECK(one_step(0.5f, 0.0f, 8e-5, 0.1, 1e-8) == doctest::Approx(0.499996).epsilon(1e-7));
  // u = 0.5: at step 1 mhat = g and vhat = g^2, so u = g / (|g| + eps); g = 1 with eps = 1
  // makes u exactly 0.5. Then p = 0.499996 - 8e-5 * 0.5.
  CHECK(one_step(0.5f, 1.0f, 8e-5, 0.1, 1.0) == doctest::Approx(0.499956).epsilon(1e-7));
}

TEST_CASE("bias correction on step 1, and step 2 against hand arithmetic") {
  kernels::cpu::CpuDevice dev(1);
  optim::AdamW opt(dev, {0.9, 0.95, 1e-8, 0.0}, kOneDecay, {0, 1});
  float p = 1.0f, g = 0.3f;
  opt.step(&p, &g, 0.01, 1.0);
  // corrected: mhat = 0.03 / 0.1 = 0.3, vhat = 0.0045 / 0.05 = 0.09 -> u = 1;
  // uncorrected it would be 0.03 / sqrt(0.0045) = 0.447
  CHECK(p == doctest::Approx(1.0 - 0.01).epsilon(1e-6));
  CHECK(opt.steps() == 1);
  g = -0.1f;
  opt.step(&p, &g, 0.01, 1.0);
  const double m = 0.9 * 0.03 + 0.1 * -0.1, v = 0.95 * 0.0045 + 0.05 * 0.01;
  const double u = (m / (1 - 0.81)) / (std::sqrt(v / (1 - 0.9025)) + 1e-8);
  CHECK(p == doctest::Approx(0.99 - 0.01 * u).epsilon(1e-6));
  CHECK(opt.m()[0] == doctest::Approx(m).epsilon(1e-6));
  CHECK(opt.v()[0] == doctest::Approx(v).epsilon(1e-6));
}

TEST_CASE("the no-decay group is untouched by weight decay") {
  kernels::cpu::CpuDevice dev(1);
  const std::vector<model::DecaySpan> spans = {{0, 2, model::DecayGroup::kDecay}, {2, 4, model::DecayGroup::kNoDecay}};
  optim::AdamW opt(dev, {0.9, 0.95, 1e-8, 0.1}, spans, {0, 4});
  std::vector<float> p = {0.5f, -2.0f, 0.5f, -2.0f}, g(4, 0.0f);
  opt.step(p.data(), g.data(), 1e-2, 1.0);
  CHECK(p[0] == doctest::Approx(0.5 * (1 - 1e-3)).epsilon(1e-7));
  CHECK(p[1] == doctest::Approx(-2.0 * (1 - 1e-3)).epsilon(1e-7));
  CHECK(p[2] == 0.5f);
  CHECK(p[3] == -2.0f);
}

TEST_CASE("shards of a range reproduce the unsharded update bit for bit") {
  Config c = tiny_config();
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  const int64_t n = reg.total();
  kernels::cpu::CpuDevice dev(2);
  std::vector<float> p0(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p0[size_t(i)] = std::sin(0.37f * float(i));
    g[size_t(i)] = std::cos(0.11f * float(i)) * 1e-2f;
  }
  auto whole = p0, sharded = p0;
  optim::AdamW all(dev, {}, reg.decay_spans(), {0, n});
  const int64_t cut = reg.at("h.0.ln_1.weight").offset + 5;  // inside a tensor, at a group boundary's neighbour
  optim::AdamW a(dev, {}, reg.decay_spans(), {0, cut}), b(dev, {}, reg.decay_spans(), {cut, n});
  for (int s = 0; s < 3; ++s) {
    all.step(whole.data(), g.data(), 1e-3, 0.7);
    a.step(sharded.data(), g.data(), 1e-3, 0.7);
    b.step(sharded.data(), g.data(), 1e-3, 0.7);
  }
  CHECK(std::memcmp(whole.data(), sharded.data(), size_t(n) * 4) == 0);
  CHECK(std::memcmp(all.m(), a.m(), size_t(cut) * 4) == 0);
  CHECK(std::memcmp(all.v() + cut, b.v(), size_t(n - cut) * 4) == 0);
  // Partial sums of squares of the shards add up to the whole.
  const auto ranges = reg.norm_ranges();
  const double total = optim::sum_squares(dev, g.data(), ranges);
  const double parts = optim::sum_squares(dev, g.data(), ranges, {0, cut}) + optim::sum_squares(dev, g.data(), ranges, {cut, n});
  CHECK(parts == doctest::Approx(total).epsilon(1e-14));
  double naive = 0;
  for (float x : g) naive += double(x) * x;
  CHECK(total == doctest::Approx(naive).epsilon(1e-14));
}

TEST_CASE("measured ranges: the update keeps its bits and its sums are those of the weights before and after") {
  // Tolerance, set before the run: 1e-12 relative for the sums against a plain double
  // loop (the same exact squares added in another order).
  // Three decay spans over 200003 elements (several 64 Ki-element blocks) and two
  // measured ranges that cut the spans and the blocks.
  const int64_t n = 200003;
  const std::vector<model::DecaySpan> spans = {{0, 70000, model::DecayGroup::kDecay},
                                               {70000, 70100, model::DecayGroup::kNoDecay},
                                               {70100, n, model::DecayGroup::kDecay}};
  kernels::cpu::CpuDevice dev(3);
  std::vector<float> p0(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    p0[size_t(i)] = std::sin(0.37f * float(i));
    g[size_t(i)] = std::cos(0.11f * float(i)) * 1e-2f;
  }
  const int64_t a0 = 3, a1 = 70050, b0 = 70067, b1 = n - 5;
  const std::vector<model::FlatRange> measured = {{a0, a1}, {b0, b1}};
  auto plain = p0, fused = p0;
  optim::AdamW ref(dev, {}, spans, {0, n});
  optim::AdamW opt(dev, {}, spans, {0, n}, measured);
  for (int s = 0; s < 3; ++s) {
    const auto before = fused;
    ref.step(plain.data(), g.data(), 1e-3, 0.7);
    opt.step(fused.data(), g.data(), 1e-3, 0.7);
    CHECK(std::memcmp(plain.data(), fused.data(), size_t(n) * 4) == 0);
    CHECK(std::memcmp(ref.m(), opt.m(), size_t(n) * 4) == 0);
    CHECK(std::memcmp(ref.v(), opt.v(), size_t(n) * 4) == 0);
    double du = 0, dw = 0;
    for (const auto& r : measured)
      for (int64_t i = r.begin; i < r.end; ++i) {
        const double d = double(fused[size_t(i)]) - double(before[size_t(i)]);
        du += d * d;
        dw += double(before[size_t(i)]) * double(before[size_t(i)]);
      }
    const auto sums = opt.update_readback();
    CHECK(sums.count == 4);  // {a0, a1} cut by the no-decay span; {b0, b1} likewise
    CHECK(sums.update_total() == doctest::Approx(du).epsilon(1e-12));
    CHECK(sums.weight_total() == doctest::Approx(dw).epsilon(1e-12));
    CHECK(du > 0);
  }
  CHECK_THROWS_AS(optim::AdamW(dev, {}, spans, {0, n}, {{b0, b1}, {a0, a1}}), std::invalid_argument);
  CHECK_THROWS_AS(optim::AdamW(dev, {}, spans, {0, n - 10}, {{b0, n}}), std::invalid_argument);
}

TEST_CASE("clipping: norm 2 halves, norm 0.5 unchanged, non-finite skips") {
  kernels::cpu::CpuDevice dev(1);
  const std::vector<model::DecaySpan> spans = {{0, 2, model::DecayGroup::kNoDecay}};
  for (auto [g0, g1, factor] : {std::tuple{1.2f, 1.6f, 0.5}, std::tuple{0.3f, 0.4f, 1.0}}) {
    std::vector<float> g = {g0, g1}, p = {0.0f, 0.0f};
    const auto d = optim::decide(optim::sum_squares(dev, g.data(), {{0, 2}}), 1.0);
    CHECK(d.norm == doctest::Approx(std::sqrt(double(g0) * g0 + double(g1) * g1)));
    CHECK(d.clipped == (factor < 1));
    CHECK(d.factor == doctest::Approx(factor));
    CHECK_FALSE(d.skip);
    optim::AdamW opt(dev, {}, spans, {0, 2});
    opt.step(p.data(), g.data(), 1e-3, d.factor);
    CHECK(opt.m()[0] == doctest::Approx(0.1 * factor * g0).epsilon(1e-6));
  }
  CHECK_FALSE(optim::decide(4.0, 0.0).clipped);  // clip 0 disables clipping
  CHECK(optim::decide(NAN, 1.0).skip);
  CHECK(optim::decide(INFINITY, 1.0).skip);
}

TEST_CASE("reference trainer: a non-finite gradient skips the update and holds the schedule") {
  Config c = tiny_config();
  c.mutable_optimizer()->set_lr(1e-2);
  c.mutable_optimizer()->set_min_lr(1e-3);
  c.mutable_lr_schedule()->set_warmup_samples(8);  // 2 updates of 4 samples
  kernels::cpu::CpuDevice dev(2);
  engine::ReferenceTrainer t(c, dev);
  const auto mbs = packed_batches();
  const sched::LrSchedule lrs(c);

  const auto r1 = t.step(mbs);
  CHECK_FALSE(r1.skipped);
  CHECK(r1.lr == lrs.lr_at(0));  // update 1: the schedule at the 0 samples before it
  CHECK(r1.lr == c.optimizer().warmup_init());
  CHECK(r1.loss_tokens == mbs[0].global_loss_tokens);
  CHECK(r1.samples == 4);

  // Poison one parameter: the loss and every gradient become NaN.
  std::vector<float> before = to_host(dev, t.model().params(), t.model().param_count());
  const int64_t poisoned = t.model().registry().at("ln_f.weight").offset;
  float nan = NAN;
  dev.copy_from_host(t.model().params() + poisoned, &nan, 4);
  const auto r2 = t.step(mbs);
  CHECK(r2.skipped);
  CHECK(std::isnan(r2.grad_norm));
  CHECK(t.successful_updates() == 1);
  CHECK(t.skipped_updates() == 1);
  CHECK(t.consumed_samples() == 8);
  CHECK(t.optimizer().steps() == 1);
  auto after = to_host(dev, t.model().params(), t.model().param_count());
  after[size_t(poisoned)] = before[size_t(poisoned)];
  CHECK(std::memcmp(before.data(), after.data(), before.size() * 4) == 0);  // nothing else touched

  dev.copy_from_host(t.model().params() + poisoned, &before[size_t(poisoned)], 4);
  const auto r3 = t.step(mbs);
  CHECK_FALSE(r3.skipped);
  CHECK(r2.lr == lrs.lr_at(4));    // after one successful update of 4 samples
  CHECK(r3.lr == r2.lr);           // the skipped update did not advance the schedule
  CHECK(r3.lr == doctest::Approx(5e-3));
  CHECK(t.consumed_samples() == 12);
  CHECK(t.optimizer().steps() == 2);
  const auto r4 = t.step(mbs);
  CHECK(r4.lr == lrs.lr_at(8));    // after two successful updates: warmup end, the peak
  CHECK(r4.lr == doctest::Approx(1e-2));
  const std::string groups = t.describe_groups();
  CHECK(groups.rfind("decay (10): wte.weight, wpe.weight, h.0.attn.c_attn.weight", 0) == 0);
  CHECK(groups.find("; no_decay (18): h.0.ln_1.weight, h.0.ln_1.bias") != std::string::npos);
}

TEST_CASE("the seed's LR schedule through the trainer's schedule: warmup end, midpoint, end") {
  Config c = tiny_config();
  c.mutable_optimizer()->set_lr(8e-5);
  c.mutable_optimizer()->set_min_lr(8e-6);
  c.mutable_lr_schedule()->set_warmup_samples(1000);
  c.mutable_lr_schedule()->set_decay_samples(5000);
  const sched::LrSchedule s(c);
  CHECK(s.lr_at(1000) == doctest::Approx(8e-5));
  CHECK(s.lr_at(3000) == doctest::Approx(4.4e-5));
  CHECK(s.lr_at(5000) == doctest::Approx(8e-6));
}

TEST_CASE("the pre-clip norm the trainer reports is the L2 norm of every gradient") {
  Config c = tiny_config();
  c.mutable_optimizer()->set_clip_grad(1e-3);  // force clipping
  kernels::cpu::CpuDevice dev(2);
  engine::ReferenceTrainer t(c, dev);
  const auto r = t.step(packed_batches());
  const auto g = to_host(dev, t.model().grads(), t.model().param_count());
  double ss = 0;
  for (float x : g) ss += double(x) * x;
  CHECK(r.grad_norm == doctest::Approx(std::sqrt(ss)).epsilon(1e-12));
  CHECK(r.clipped);
  CHECK(r.clip_factor == doctest::Approx(1e-3 / r.grad_norm).epsilon(1e-12));
  // AdamW saw the clipped gradient: m = 0.1 * factor * g on every element.
  const float* m = t.optimizer().m();
  for (int64_t i = 0; i < t.model().param_count(); i += 97)
    CHECK(m[i] == doctest::Approx(0.1 * r.clip_factor * g[size_t(i)]).epsilon(1e-5).scale(1e-12));
}
