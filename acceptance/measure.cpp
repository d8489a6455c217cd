#include "acceptance/measure.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "config/derived.h"
#include "data/batch_source.h"
#include "engine/optimizer_shard.h"
#include "engine/rank_device.h"
#include "engine/stage_worker.h"
#include "kernels/cpu/cpu_device.h"
#include "sched/activation_memory.h"

namespace troupe::acceptance {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
namespace {

int64_t status_field_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    int64_t kb = 0;
    fields >> kb;
    return kb;
  }
  return 0;
}

// Runs fn(i) for i in [0, n) on n threads at once (collectives need every member).
void on_all_ranks(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

WindowThroughput window_throughput(const std::vector<metrics::StepRecord>& steps, int64_t warmup) {
  WindowThroughput w;
  std::vector<double> times;
  for (const auto& s : steps) {
    if (s.step <= warmup || s.recomputed) continue;
    if (w.updates == 0) w.first_step = s.step;
    w.last_step = s.step;
    ++w.updates;
    w.skipped += s.skipped;
    w.real_tokens += metrics::real_tokens(s);
    w.padding_tokens += s.padding_tokens;
    w.step_seconds += s.step_time_s;
    times.push_back(s.step_time_s);
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    w.median_step_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  }
  if (w.step_seconds > 0) w.tokens_per_s = double(w.real_tokens) / w.step_seconds;
  return w;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return bool(out);
}

int64_t peak_rss_bytes() { return status_field_kb("VmHWM") * 1024; }
int64_t current_rss_bytes() { return status_field_kb("VmRSS") * 1024; }
int64_t physical_memory_bytes() { return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)); }

std::vector<RankMemory> measure_step_memory(const Config& c) {
  const auto topo = engine::Topology::logical(c);
  const auto ranks = topo.all_ranks();
  const auto plan = engine::make_inprocess_comms(topo, std::chrono::seconds(120));
  const bool distributed = c.parallel().distributed_optimizer();

  // The objects the stage and optimizer actors own, built the same way; the shard
  // uses its stage's parameter layout.
  std::vector<std::unique_ptr<engine::StageWorker>> workers;
  std::vector<std::unique_ptr<kernels::cpu::CpuDevice>> optim_devices;
  std::vector<std::unique_ptr<engine::OptimizerShard>> shards;
  for (const auto& r : ranks) {
    workers.push_back(std::make_unique<engine::StageWorker>(c, r, plan.ranks[size_t(topo.index(r))]));
    optim_devices.push_back(std::make_unique<kernels::cpu::CpuDevice>(engine::threads_per_stage(c, topo)));
    shards.push_back(std::make_unique<engine::OptimizerShard>(optim::AdamWHyper::from_config(c), *optim_devices.back(),
                                                              workers.back()->model().registry(),
                                                              workers.back()->shard_range(),
                                                              distributed || r.dp == 0));
  }
  auto worker = [&](int dp, int pp, int tp) -> engine::StageWorker& {
    return *workers[size_t(topo.index({dp, pp, tp}))];
  };

  // One step. Microbatches go depth first (each through every virtual stage forward,
  // then backward; under the split backward each stage's weight pass right after its
  // input pass): one microbatch in flight at a time fits any slot count, and the
  // slots are allocated when the stage is built, so the order changes no peak. The
  // tensor-parallel ranks of a stage run together (their collectives pair up).
  const auto src = data::BatchSource::open(c);
  const int m = int(config::microbatches_per_replica(c));
  for (auto& w : workers) {
    w->begin_step();
    w->reserve_losses(m);
  }
  for (int d = 0; d < topo.dp; ++d)
    for (int j = 0; j < m; ++j) {
      const auto mb = src.microbatch(0, d, j);
      on_all_ranks(size_t(topo.tp), [&](size_t t) {
        const int chunks = worker(d, 0, int(t)).chunks();
        const float* x = nullptr;
        for (int chunk = 0; chunk < chunks; ++chunk)
          for (int p = 0; p < topo.pp; ++p) {
            auto& w = worker(d, p, int(t));
            w.forward(j, mb, x, chunk);
            if (!w.chunk_is_last(chunk)) x = w.output(j, chunk);
          }
        const float* g = nullptr;
        for (int chunk = chunks - 1; chunk >= 0; --chunk)
          for (int p = topo.pp - 1; p >= 0; --p) {
            auto& w = worker(d, p, int(t));
            if (w.split_backward()) {
              w.backward_input(j, g);
              w.backward_weight(j, false);
            } else {
              w.backward(j, g, false, chunk);
            }
            if (!w.chunk_is_first(chunk)) g = w.input_grad(j, chunk);
          }
      });
    }
  on_all_ranks(ranks.size(), [&](size_t i) { workers[i]->reduce_gradients(); });
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto& model = workers[i]->model();
    shards[i]->norm_partial(model.grads());
    shards[i]->apply(model.params(), model.grads(), c.optimizer().lr(), 1.0);
  }
  on_all_ranks(ranks.size(), [&](size_t i) { workers[i]->gather_parameters(); });

  const auto activation_plan = sched::activation_plan(c);
  std::vector<RankMemory> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto& w = *workers[i];
    auto& dev = dynamic_cast<kernels::cpu::CpuDevice&>(w.device());
    const auto range = shards[i]->range();
    RankMemory r;
    r.rank = ranks[i];
    r.params = w.model().param_count();
    for (const auto& t : w.model().registry().tensors())
      if (!t.counts_in_norm) r.duplicates += t.numel;
    r.shard = range.end - range.begin;
    r.slots = w.model().slots();
    r.slot_bytes = w.model().slot_floats() * 4;  // fp32 activations; token ints are 4 bytes too
    r.all_slot_bytes = w.model().all_slot_floats() * 4;
    r.stage_scratch_bytes =
        (w.model().scratch_floats() + w.model().tp_buffer_floats() + w.model().table_floats()) * 4;
    r.stage_allocations = dev.allocated_blocks();
    // The ledgers' peaks hold the kernel scratch too (it only grows, and the blocks are
    // all allocated before the step: the peak is the step's end).
    r.stage_split = dev.memory().peak();
    r.kernel_scratch = dev.scratch_bytes();
    r.stage_peak = r.stage_split.total() - r.kernel_scratch;
    r.optim_kernel_scratch = optim_devices[i]->scratch_bytes();
    r.optim_peak = optim_devices[i]->memory().peak().total() - r.optim_kernel_scratch;
    r.planned_activations = activation_plan[size_t(r.rank.pp)].saved_bytes();
    out.push_back(r);
  }
  return out;
}

}  // namespace troupe::acceptance
