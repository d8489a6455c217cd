// The single-device reference trainer: one whole model (stage [0, layers)), its
// AdamW state, the LR schedule position and the counters. Every parallel and GPU
// result is compared against it (the runtime's parity tests build one from the
// same config and feed it the same global batch).
//
// step(microbatches) is one update over one global batch: zero the gradients; for
// each microbatch forward then backward (gradients add up, each microbatch's
// backward scaled by 1 / global_loss_tokens); global norm; clip or skip; AdamW with
// lr = LrSchedule::lr_for_update(successful updates so far). After step() the
// gradient buffer still holds the gradients BEFORE clipping (clipping is applied as
// a factor inside AdamW), which is what inspect-update records.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/batch.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/gpt_stage.h"
#include "optim/adamw.h"
#include "sched/lr_schedule.h"

namespace troupe::engine {

struct StepReport {
  double loss = 0;           // sum of per-token losses / loss-bearing tokens of the global batch
  double loss_sum = 0;       // the numerator
  int64_t loss_tokens = 0;   // the denominator
  int64_t samples = 0;       // sequences in the global batch
  double grad_norm = 0;      // before clipping
  bool clipped = false;
  double clip_factor = 1;
  bool skipped = false;      // non-finite norm: nothing updated
  double lr = 0;             // learning rate applied (of the update that would have run if skipped)
};

class ReferenceTrainer {
 public:
  ReferenceTrainer(const Config& c, kernels::Device& device);

  // One update over the global batch given as its microbatches, in order. Each
  // microbatch's global_loss_tokens must equal the total of the batch.
  StepReport step(std::span<const data::Microbatch> microbatches);

  // Forward + backward of every microbatch into freshly zeroed gradients, without
  // the optimizer: returns loss, tokens and the pre-clip norm (lr, clip unset).
  StepReport accumulate(std::span<const data::Microbatch> microbatches);

  model::GptStage& model() { return model_; }
  optim::AdamW& optimizer() { return adamw_; }
  const sched::LrSchedule& schedule() const { return schedule_; }

  int64_t successful_updates() const { return successful_; }
  int64_t skipped_updates() const { return skipped_; }
  int64_t consumed_samples() const { return consumed_; }
  void set_counters(int64_t successful, int64_t skipped, int64_t consumed);

  // "decay: wte.weight, ...; no_decay: ..." for the startup log.
  std::string describe_groups() const;

 private:
  StepReport accumulate(std::span<const data::Microbatch> microbatches, double* sum_squares);

  Config config_;
  kernels::Device& device_;
  model::GptStage model_;
  optim::AdamW adamw_;
  sched::LrSchedule schedule_;
  std::vector<model::FlatRange> norm_ranges_;
  int64_t successful_ = 0, skipped_ = 0, consumed_ = 0;
};

}  // namespace troupe::engine
