#include "metrics/step_record.h"

#include <algorithm>

namespace troupe::metrics {

std::string dataset_tag(size_t index, const std::string& prefix) {
  const auto slash = prefix.find_last_of('/');
  return std::to_string(index) + "_" + (slash == std::string::npos ? prefix : prefix.substr(slash + 1));
}

double tokens_per_second(const StepRecord& r) {
  return r.step_time_s > 0 ? double(real_tokens(r)) / r.step_time_s : 0.0;
}

double tokens_per_second(const RunSummary& s) {
  return s.train_time_s > 0 ? double(s.input_tokens - s.padding_tokens) / s.train_time_s : 0.0;
}

void accumulate(RunSummary& s, const StepRecord& r) {
  if (s.steps == 0) s.first_loss = r.loss;
  s.steps += 1;
  s.skipped_steps += r.skipped ? 1 : 0;
  s.clipped_steps += r.clipped ? 1 : 0;
  s.consumed_samples = r.consumed_samples;
  s.skipped_samples += int64_t(r.skipped_samples.size());
  s.input_tokens += r.input_tokens;
  s.loss_tokens += r.loss_tokens;
  s.padding_tokens += r.padding_tokens;
  s.last_loss = r.loss;
  s.train_time_s += r.step_time_s;
  s.restarts = std::max(s.restarts, r.restarts);
}

}  // namespace troupe::metrics
