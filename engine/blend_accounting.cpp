#include "engine/blend_accounting.h"

#include <spdlog/spdlog.h>

#include "engine/document_losses.h"

namespace troupe::engine {

std::vector<TrainingPosition::Dataset> blend_position(const data::BatchSource& train, const TrainingPosition& pos) {
  if (!train.blended()) return {};
  const std::vector<int64_t> samples = train.dataset_positions(pos.consumed_samples);
  bool agrees = pos.datasets.size() == size_t(train.datasets());
  for (size_t d = 0; agrees && d < pos.datasets.size(); ++d)
    agrees = pos.datasets[d].prefix == train.prefix_of(int(d)) && pos.datasets[d].samples == samples[d];
  if (agrees) return pos.datasets;
  if (pos.consumed_samples > 0)
    spdlog::warn("data.blend: the resumed position's per-dataset counts ({} datasets) are not this blend's at {} "
                 "consumed samples (were the datasets or weights changed?); counting each dataset's tokens afresh "
                 "from the blend's order",
                 pos.datasets.size(), pos.consumed_samples);
  const auto counts = train.dataset_counts(0, pos.consumed_samples);
  std::vector<TrainingPosition::Dataset> out;
  for (int d = 0; d < train.datasets(); ++d) out.push_back({train.prefix_of(d), samples[size_t(d)], counts[size_t(d)].tokens});
  return out;
}

std::vector<metrics::DatasetRecord> advance_blend(const data::BatchSource& train, TrainingPosition& pos,
                                                  int64_t consumed_before, int64_t count) {
  std::vector<metrics::DatasetRecord> out;
  if (!train.blended()) return out;
  const auto step = train.dataset_counts(consumed_before, count);
  for (size_t d = 0; d < step.size(); ++d) {
    auto& p = pos.datasets.at(d);
    p.samples += step[d].samples;
    p.tokens += step[d].tokens;
    out.push_back({p.prefix, step[d].samples, step[d].tokens, p.samples, p.tokens});
  }
  return out;
}

std::vector<metrics::EvalRecord::Dataset> eval_dataset_losses(
    const std::vector<std::vector<msg::SegmentLoss>>& segments, const std::vector<int64_t>& sample_ids, int rows,
    const data::BatchSource& valid) {
  std::vector<metrics::EvalRecord::Dataset> out;
  if (!valid.blended()) return out;
  std::vector<double> sums(size_t(valid.datasets()), 0.0);
  for (int d = 0; d < valid.datasets(); ++d) out.push_back({valid.prefix_of(d), 0.0, 0, 0});
  for (const auto& doc : document_losses(segments, sample_ids, rows, valid)) {
    sums[size_t(doc.dataset)] += doc.loss_sum;
    out[size_t(doc.dataset)].loss_tokens += doc.loss_tokens;
  }
  for (const int64_t id : sample_ids) ++out[size_t(valid.dataset_of(id))].samples;
  for (size_t d = 0; d < out.size(); ++d)
    out[d].loss = out[d].loss_tokens > 0 ? sums[d] / double(out[d].loss_tokens) : 0.0;
  return out;
}

}  // namespace troupe::engine
