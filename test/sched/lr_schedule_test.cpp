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

TEST_CASE("lr_for_update counts the batch being applied") {
  LrSchedule s(make(LrScheduleConfig::COSINE));
  // Global batch 100: update 0 runs at schedule position 100.
  CHECK(s.lr_for_update(0) == s.lr_at(100));
  CHECK(s.lr_for_update(0) == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(s.lr_for_update(9) == 8e-5);  // the 10th update ends warmup
  CHECK(s.lr_for_update(59) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_for_update(109) == doctest::Approx(8e-6).epsilon(1e-12));
}

TEST_CASE("the seed schedule: warmup 2,442,240 and decay 1,220,701,440 samples") {
  Config c;
  c.mutable_optimizer()->set_lr(8e-5);
  c.mutable_optimizer()->set_min_lr(8e-6);
  c.mutable_lr_schedule()->set_warmup_samples(2442240);
  c.mutable_lr_schedule()->set_decay_samples(1220701440);
  c.mutable_batch()->set_global_batch_size(1920);
  LrSchedule s(c);
  CHECK(s.lr_for_update(1271) == 8e-5);  // 1,272 updates of warmup
  CHECK(s.lr_for_update(1270) < 8e-5);
  CHECK(s.lr_at((2442240 + 1220701440) / 2) == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(s.lr_for_update(635781) == doctest::Approx(8e-6).epsilon(1e-12));
}
