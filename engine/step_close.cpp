#include "engine/step_close.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/blend_accounting.h"
#include "engine/document_losses.h"

namespace troupe::engine {

UpdateDecision decide_update(const Config& c, const StepLedger& ledger, SpikeGuard& guard,
                             const data::BatchSource& train, int64_t consumed_before,
                             const std::vector<int64_t>& earlier_spikes) {
  UpdateDecision d;
  d.clip = optim::decide(ledger.total_sum_squares(), c.optimizer().clip_grad());
  if (!guard.active()) return d;
  // The loss exactly as the step record computes it (the loaders' and the last stages'
  // token counts agree, close_train_step checks).
  const double loss = ledger.loss_tokens() > 0 ? ledger.loss_sum() / double(ledger.loss_tokens()) : 0.0;
  const bool spike = guard.drop_update(ledger.step(), loss, d.clip.norm);
  d.spike_dropped = spike && !d.clip.skip;
  d.clip.skip = d.clip.skip || spike;
  if (spike && guard.rolls_back())
    d.rollback = decide_rollback(c, train, ledger.step(), consumed_before, earlier_spikes);
  return d;
}

double step_end_time(const StepLedger& ledger) {
  double end = 0;
  for (const auto& t : ledger.timings()) end = std::max(end, t.end_time);
  if (end > 0) return end;
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

metrics::StepRecord close_train_step(const StepLedger& ledger, const optim::ClipDecision& clip, double lr,
                                     const data::BatchSource& train, double started, TrainingPosition& pos) {
  const auto counts = ledger.counts();
  if (counts.loss_tokens != ledger.loss_tokens())
    throw std::logic_error(fmt::format("step {}: loaders counted {} loss-bearing tokens, last stages {}",
                                       ledger.step(), counts.loss_tokens, ledger.loss_tokens()));
  const auto mismatch = ledger.applied_mismatch(msg::UpdateCommand{ledger.step(), lr, clip.factor, clip.skip});
  if (!mismatch.empty()) throw std::logic_error(mismatch);
  metrics::StepRecord r;
  r.step = ledger.step();
  pos.step = r.step;
  r.skipped_samples = train.skipped_in(pos.consumed_samples, counts.samples);
  r.samples_hash = metrics::sample_content_hash(ledger.sample_ids());
  r.datasets = advance_blend(train, pos, pos.consumed_samples, counts.samples);
  pos.consumed_samples += counts.samples;
  r.consumed_samples = pos.consumed_samples;
  r.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  r.lr = lr;
  r.grad_norm = clip.norm;
  r.clipped = clip.clipped;
  r.skipped = clip.skip;
  r.input_tokens = counts.input_tokens;
  r.loss_tokens = counts.loss_tokens;
  r.padding_tokens = counts.padding_tokens;
  r.stage_memory = ledger.stage_memory();
  r.wall_time = step_end_time(ledger);
  r.step_time_s = std::max(0.0, r.wall_time - started);
  if (r.skipped)
    ++pos.skipped_updates;
  else
    ++pos.successful_updates;
  pos.epoch = train.epoch_of(pos.consumed_samples);
  return r;
}

StepExtras step_extras(const StepLedger& ledger, const metrics::StepRecord& r, const Topology& topo,
                       int32_t microbatches, int32_t micro_batch_size, const data::BatchSource& train) {
  StepExtras x;
  x.detail.step = r.step;
  x.detail.loss = r.loss;
  x.detail.grad_norm = r.grad_norm;
  x.detail.lr = r.lr;
  x.detail.clipped = r.clipped;
  for (double s : ledger.stage_sum_squares()) x.detail.stage_grad_norms.push_back(std::sqrt(s));
  for (const auto& [layer, s] : ledger.layer_sum_squares()) x.detail.layer_grad_norms.emplace_back(layer, std::sqrt(s));
  const auto losses = ledger.microbatch_losses();
  const auto tokens = ledger.microbatch_loss_tokens();
  const auto ids = ledger.sample_ids();  // replica-major, microbatch, row
  const size_t rows = size_t(micro_batch_size);
  for (int32_t d = 0; d < topo.dp; ++d)
    for (int32_t j = 0; j < microbatches; ++j) {
      const size_t i = size_t(d) * size_t(microbatches) + size_t(j);
      metrics::MicrobatchLoss m;
      m.replica = d;
      m.index = j;
      if ((i + 1) * rows <= ids.size()) m.sample_ids.assign(ids.begin() + i * rows, ids.begin() + (i + 1) * rows);
      m.loss_tokens = tokens[i];
      m.loss = tokens[i] > 0 ? losses[i] / double(tokens[i]) : 0.0;
      x.detail.microbatches.push_back(std::move(m));
    }
  x.detail.documents = document_losses(ledger.segment_losses(), ids, int(rows), train);
  if (!r.skipped) {  // a dropped update has no ratio
    const auto u = ledger.update_sums();
    x.detail.update_norm = std::sqrt(u.update_sum_squares);
    x.detail.weight_norm = std::sqrt(u.weight_sum_squares);
  }
  for (const auto& rank : topo.all_ranks()) x.stage_paths.push_back(stage_path(rank));
  x.timings = ledger.timings();
  return x;
}

metrics::EvalRecord close_eval(const StepLedger& ledger, const TrainingPosition& pos, int32_t micro_batch_size,
                               const data::BatchSource* valid) {
  const auto counts = ledger.counts();
  metrics::EvalRecord e;
  e.step = pos.step;
  e.consumed_samples = pos.consumed_samples;
  e.loss = counts.loss_tokens > 0 ? ledger.loss_sum() / double(counts.loss_tokens) : 0.0;
  e.samples = counts.samples;
  e.loss_tokens = counts.loss_tokens;
  if (valid) e.datasets = eval_dataset_losses(ledger.segment_losses(), ledger.sample_ids(), micro_batch_size, *valid);
  return e;
}

}  // namespace troupe::engine
