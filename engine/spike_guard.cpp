#include "engine/spike_guard.h"

namespace troupe::engine {

metrics::SpikeOptions spike_options(const LoggingConfig& lc) {
  return {lc.spike_window(), lc.spike_min_history(), lc.spike_mad_k(), lc.spike_loss_min_jump(),
          lc.spike_grad_norm_min_jump()};
}

SpikeGuard::SpikeGuard(const Config& c)
    : active_(c.logging().on_spike() != LoggingConfig::RECORD),
      rolls_back_(c.logging().on_spike() == LoggingConfig::ROLLBACK),
      detector_(spike_options(c.logging())) {}

bool SpikeGuard::drop_update(int64_t step, double loss, double grad_norm) {
  if (!active_) return false;
  metrics::StepDetail d;
  d.step = step;
  d.loss = loss;
  d.grad_norm = grad_norm;
  return detector_.observe(d).has_value();
}

}  // namespace troupe::engine
