// The LR schedule: warmup, cosine / linear / constant decay, the update convention.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "sched/lr_schedule.h"

using troupe::Config;
using troupe::LrScheduleConfig;
using troupe::sched::LrSchedule;

namespace {

// The seed's schedule, scaled down: warmup 1,000, decay ends at 11,000 samples.
Config make(LrScheduleConfig::DecayStyle style, double warmup_init = 0.0) {
  Config c;
  c.mutable_optimizer()->set_lr(8e-5);
  c.mutable_optimizer()->set_min_lr(8e-6);
  c.mutable_optimizer()->set_warmup_init(warmup_init);
  c.mutable_lr_schedule()->set_warmup_samples(1000);
  c.mutable_lr_schedule()->set_decay_samples(11000);
  c.mutable_lr_schedule()->set_decay_style(style);
  c.mutable_batch()->set_global_batch_size(100);
  c.mutable_training()->set_train_samples(20000);
  return c;
}

}  // namespace

TEST_CASE("linear warmup from zero reaches lr exactly at warmup end") {
  LrSchedule s(make(LrScheduleConfig::COSINE));
  CHECK(s.lr_at(0) == 0.0);
  CHECK(s.lr_at(250) == doctest::Approx(2e-5).epsilon(1e-12));
  CHECK(s.lr_at(500) == doctest::Approx(4e-5).epsilon(1e-12));
  CHECK(s.lr_at(1000) == 8e-5);
}

TEST_CASE("warmup starts at warmup_init when it is not zero") {
  LrSchedule s(make(LrScheduleConfig::COSINE, 1e-5));
  CHECK(s.lr_at(0) == 1e-5);
  CHECK(s.lr_at(500) == doctest::Approx(4.5e-5).epsilon(1e-12));
  CHECK(s.lr_at(1000) == 8e-5);
}

TEST_CASE("cosine: midpoint between 8e-5 and 8e-6 is 4.4e-5, end is min_lr, beyond stays") {
  LrSchedule s(make(LrScheduleConfig::COSINE));
  CHECK(s.lr_at(6000) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_at(11000) == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(s.lr_at(11001) == 8e-6);
  CHECK(s.lr_at(1000000) == 8e-6);
  // A quarter of the way: min + (lr - min) * (1 + cos(pi/4)) / 2.
  const double q = 8e-6 + 72e-6 * 0.5 * (1 + std::cos(std::numbers::pi / 4));
  CHECK(s.lr_at(3500) == doctest::Approx(q).epsilon(1e-12));
  // Monotone non-increasing after warmup.
  double prev = s.lr_at(1000);
  for (int64_t x = 1000; x <= 12000; x += 37) {
    CHECK(s.lr_at(x) <= prev);
    prev = s.lr_at(x);
  }
}

TEST_CASE("linear decay") {
  LrSchedule s(make(LrScheduleConfig::LINEAR));
  CHECK(s.lr_at(1000) == doctest::Approx(8e-5).epsilon(1e-12));
  CHECK(s.lr_at(6000) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_at(3500) == doctest::Approx(8e-6 + 72e-6 * 0.75).epsilon(1e-12));
  CHECK(s.lr_at(11000) == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(s.lr_at(50000) == 8e-6);
}

TEST_CASE("constant style holds lr after warmup, also beyond the decay end") {
  LrSchedule s(make(LrScheduleConfig::CONSTANT));
  CHECK(s.lr_at(500) == doctest::Approx(4e-5).epsilon(1e-12));
  CHECK(s.lr_at(1000) == 8e-5);
  CHECK(s.lr_at(6000) == 8e-5);
  CHECK(s.lr_at(11000) == 8e-5);
  CHECK(s.lr_at(50000) == 8e-5);
}

TEST_CASE("no warmup: the first sample is already decaying from lr") {
  Config c = make(LrScheduleConfig::COSINE);
  c.mutable_lr_schedule()->set_warmup_samples(0);
  LrSchedule s(c);
  CHECK(s.lr_at(0) == 8e-5);
  CHECK(s.lr_at(5500) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_at(11000) == doctest::Approx(8e-6).epsilon(1e-12));
}

TEST_CASE("decay_samples 0 means train_samples") {
  Config c = make(LrScheduleConfig::COSINE);
  c.mutable_lr_schedule()->set_decay_samples(0);
  LrSchedule s(c);
  CHECK(s.decay_samples() == 20000);
  CHECK(s.lr_at(10500) == doctest::Approx(4.4e-5).epsilon(1e-12));
}

TEST_CASE("lr_for_update: the schedule at the samples consumed before the update") {
  LrSchedule s(make(LrScheduleConfig::COSINE));
  // Global batch 100, warmup 1,000: update 1 (0 successful before it) runs at
  // schedule position 0, update 11 at 1,000 (the peak).
  CHECK(s.lr_for_update(0) == s.lr_at(0));
  CHECK(s.lr_for_update(0) == 0.0);
  CHECK(s.lr_for_update(1) == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(s.lr_for_update(9) < 8e-5);
  CHECK(s.lr_for_update(10) == 8e-5);  // the 11th update is the first at the peak
  CHECK(s.lr_for_update(60) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_for_update(110) == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(s.lr_for_update(111) == 8e-6);
}

// The seed's arguments (--lr 8e-5 --min-lr 8e-6 --lr-warmup-init 0
// --lr-warmup-samples 2442240 --lr-decay-samples 1220701440 --global-batch-size 1920
// --lr-decay-style cosine), with Megatron's get_lr written out by hand: the LR of
// update k is get_lr at (k - 1) x 1,920 samples (docs/planner.md lists the values).
TEST_CASE("the seed schedule at the updates Megatron's training loop applies it") {
  Config c;
  c.mutable_optimizer()->set_lr(8e-5);
  c.mutable_optimizer()->set_min_lr(8e-6);
  c.mutable_optimizer()->set_warmup_init(0.0);
  c.mutable_lr_schedule()->set_warmup_samples(2442240);
  c.mutable_lr_schedule()->set_decay_samples(1220701440);
  c.mutable_batch()->set_global_batch_size(1920);
  LrSchedule s(c);
  auto update = [&](int64_t k) { return s.lr_for_update(k - 1); };  // k: 1-based update
  auto cosine = [](double consumed) {  // Megatron's decay branch at `consumed` samples
    const double ratio = (consumed - 2442240.0) / (1220701440.0 - 2442240.0);
    return 8e-6 + (8e-5 - 8e-6) * 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  };
  CHECK(update(1) == 0.0);                                               // 0 samples
  CHECK(update(2) == doctest::Approx(6.289308176100629e-08).epsilon(1e-12));  // 8e-5 x 1920 / 2442240
  CHECK(update(1272) == doctest::Approx(8e-5 * 1271.0 / 1272.0).epsilon(1e-12));
  CHECK(update(1272) == doctest::Approx(7.993710691823899e-05).epsilon(1e-12));
  CHECK(update(1273) == 8e-5);                                           // 2,442,240: warmup end
  CHECK(update(1274) == doctest::Approx(cosine(2444160.0)).epsilon(1e-12));
  CHECK(update(1274) < 8e-5);
  CHECK(update(318528) == doctest::Approx(4.4e-5).epsilon(1e-12));       // 611,571,840: midpoint
  CHECK(update(635782) == doctest::Approx(cosine(1220699520.0)).epsilon(1e-12));  // the run's last
  CHECK(update(635782) > 8e-6);
  CHECK(update(635783) == doctest::Approx(8e-6).epsilon(1e-12));         // 1,220,701,440: decay end
  CHECK(update(635784) == 8e-6);                                         // past the end: min_lr
  CHECK(update(1000000) == 8e-6);
}
