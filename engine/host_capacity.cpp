#include "engine/host_capacity.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

#include <stdexcept>

#include <fmt/format.h>

#include "config/derived.h"
#include "engine/rank_device.h"

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

namespace {

// glibc's arenas: each reserves 64 MiB of address space (HEAP_MAX_SIZE on 64-bit), at
// most 8 per core.
constexpr double kArenaBytes = 64.0 * (1 << 20);

// VmSize of this process, bytes (0 when /proc cannot say).
double mapped_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  double kb = 0;
  while (status >> key) {
    if (key == "VmSize:") {
      status >> kb;
      return kb * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

}  // namespace

double min_address_space_bytes(const Config& c) {
  const auto& p = c.parallel();
  const double ranks = double(p.data()) * p.pipeline() * p.tensor();
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  // CAF's scheduler (at least 2 workers) and clock, the run's own watchdog and the
  // main thread; per rank a stage, an optimizer shard and a writer thread and the
  // compute pool's workers (its caller is the stage's thread); the metrics actor.
  const auto configured = Topology::logical(c).placed_on(config::physical_replicas(c));  // the start's placement
  const double threads = std::max(2.0, cores) + 3 + ranks * (3 + (threads_per_stage(c, configured) - 1)) + 1;
  rlimit stack{};
  const double stack_bytes =
      ::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY ? double(stack.rlim_cur) : 8 << 20;
  const double arenas = std::min(threads, 8 * cores);
  return mapped_bytes() + threads * stack_bytes + arenas * kArenaBytes + min_host_bytes(c);
}

void check_address_space(const Config& c) {
  if (c.cluster().workers() > 0 || c.device().type() != DeviceConfig::CPU) return;
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return;
  const double need = min_address_space_bytes(c);
  if (double(as.rlim_cur) < need)
    throw std::invalid_argument(fmt::format(
        "address space: this process may map {:.3g} GB (ulimit -v {}), and this run maps at least {:.3g} GB (its "
        "libraries, a stack and a malloc arena for each of its threads, its parameters and activations): raise the "
        "limit or run a smaller layout",
        double(as.rlim_cur) / 1e9, as.rlim_cur / 1024, need / 1e9));
}

}  // namespace troupe::engine
