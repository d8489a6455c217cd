#include "engine/host_capacity.h"

#include <unistd.h>

#include <stdexcept>

#include <fmt/format.h>

#include "config/derived.h"

namespace troupe::engine {

double min_host_bytes(const Config& c) {
  const double state = double(config::parameter_count(c)) * (8.0 * c.parallel().data() + 8.0);
  // Each layer keeps, for at least one microbatch in flight on every replica, its input
  // [b, s, D] and its attention probabilities [b, heads, s, s] (fp32) for the backward;
  // tensor parallelism splits both across its ranks, so the sum over them is the whole.
  const auto& m = c.model();
  const double b = c.batch().micro_batch_size(), s = c.batch().seq_length();
  const double per_layer = 4.0 * b * s * (double(m.width()) + double(m.heads()) * s);
  return state + double(c.parallel().data()) * double(m.layers()) * per_layer;
}

void check_host_capacity(const Config& c, double physical_bytes) {
  if (c.cluster().workers() > 0 || c.device().type() != DeviceConfig::CPU) return;
  const auto& p = c.parallel();
  const int64_t ranks = int64_t(p.data()) * p.pipeline() * p.tensor();
  if (ranks > kMaxRanksInProcess)
    throw std::invalid_argument(fmt::format(
        "parallel: data {} x pipeline {} x tensor {} = {} ranks in one process, more than the {} it runs (a stage, an "
        "optimizer shard and a writer thread each); run larger layouts in cluster mode",
        p.data(), p.pipeline(), p.tensor(), ranks, kMaxRanksInProcess));
  if (physical_bytes < 0) physical_bytes = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  const double need = min_host_bytes(c);
  if (need > physical_bytes)
    throw std::invalid_argument(fmt::format(
        "model: {} parameters and their activations need at least {:.3g} GB in this process (fp32 weights and "
        "gradients on each of the {} data-parallel replicas, 8 bytes a parameter, the Adam moments, 8 more, and every "
        "layer's input and attention probabilities for one microbatch); this machine has {:.3g} GB",
        config::parameter_count(c), need / 1e9, p.data(), physical_bytes / 1e9));
}

}  // namespace troupe::engine
