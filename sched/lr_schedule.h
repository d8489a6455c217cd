// The learning-rate schedule, measured in samples (docs/numerics.md, "Learning-rate schedule").
//
//   s <= warmup:          lr(s) = warmup_init + (lr - warmup_init) * s / warmup
//   warmup < s <= decay:  COSINE   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * t))
//                         LINEAR   min_lr + (lr - min_lr) * (1 - t)
//                         CONSTANT lr
//                         with t = (s - warmup) / (decay - warmup)
//   s > decay:            min_lr; CONSTANT stays at lr (Megatron's constant style:
//                         min_lr plays no part)
//
// warmup = lr_schedule.warmup_samples, decay = config::decay_samples(c)
// (lr_schedule.decay_samples, or training.train_samples when that is 0).
// lr, min_lr and warmup_init come from optimizer.*.
#pragma once

#include <cstdint>

#include "messages/config.pb.h"

namespace troupe::sched {

class LrSchedule {
 public:
  explicit LrSchedule(const Config& c);

  // The learning rate at schedule position `samples` (the samples of the successful
  // updates before the one being applied). A pure function of its argument.
  double lr_at(int64_t samples) const;

  // The learning rate of the update that follows `successful_updates` successful
  // updates. Convention (Megatron's training loop: its scheduler steps after
  // optimizer.step(), and its constructor sets the LR at 0 samples): the schedule
  // position is the samples consumed *before* the update, so this is
  // lr_at(successful_updates * global_batch_size). Update 1 applies lr_at(0) =
  // warmup_init; with warmup W = n x global_batch, update n + 1 is the first at the
  // peak. Skipped updates (non-finite gradient norm) do not advance
  // successful_updates, hence the schedule does not move for them; consumed samples
  // do move elsewhere. docs/planner.md has the seed's values.
  double lr_for_update(int64_t successful_updates) const;

  int64_t warmup_samples() const { return warmup_; }
  int64_t decay_samples() const { return decay_; }

 private:
  double lr_, min_lr_, warmup_init_;
  int64_t warmup_, decay_, global_batch_;
  LrScheduleConfig::DecayStyle style_;
};

}  // namespace troupe::sched
