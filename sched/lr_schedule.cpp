#include "sched/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "config/derived.h"

namespace troupe::sched {

LrSchedule::LrSchedule(const Config& c)
    : lr_(c.optimizer().lr()),
      min_lr_(c.optimizer().min_lr()),
      warmup_init_(c.optimizer().warmup_init()),
      warmup_(c.lr_schedule().warmup_samples()),
      decay_(config::decay_samples(c)),
      global_batch_(c.batch().global_batch_size()),
      style_(c.lr_schedule().decay_style()) {}

double LrSchedule::lr_at(int64_t samples) const {
  if (samples < 0) samples = 0;
  // Megatron's boundaries: warmup includes its last sample (lr there), decay ends
  // at decay_ (min_lr there by the formula) and min_lr holds after it.
  if (warmup_ > 0 && samples <= warmup_)
    return warmup_init_ + (lr_ - warmup_init_) * double(samples) / double(warmup_);
  if (style_ == LrScheduleConfig::CONSTANT) return lr_;
  if (samples > decay_) return min_lr_;
  if (decay_ <= warmup_) return lr_;  // no decay phase (validation forbids decay < warmup)
  // warmup_ <= samples <= decay_ and warmup_ < decay_, so t lies in [0, 1].
  const double t = double(samples - warmup_) / double(decay_ - warmup_);
  if (style_ == LrScheduleConfig::LINEAR) return min_lr_ + (lr_ - min_lr_) * (1.0 - t);
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

double LrSchedule::lr_for_update(int64_t successful_updates) const {
  return lr_at(successful_updates * global_batch_);
}

}  // namespace troupe::sched
