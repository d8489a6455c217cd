// bench/placement_bench: what hosting several logical replicas on one physical one costs
// (parallel.physical_replicas, docs/layout.md).
//
// 1. Throughput: logical DP4 placed on one physical replica against plain DP1 with the
//    same global batch, so that one device computes the same microbatches either way
//    (DP1: m microbatches of the global batch; DP4 on one: 4 turns of m / 4). The extra
//    work of the hosted run is its ordered reduction (a copy and three additions of the
//    gradient buffer) and four optimizer shards instead of one; goal: within 5%.
//    Runs alternate (DP1, hosted, DP1, ...); each run's median step time after warm-up,
//    then the median of the per-pair ratios.
// 2. Memory: the peak a worker's device reports (the memory ledger's split) when it
//    hosts 1, 2 and 4 logical replicas of DP4, beside the figure docs/layout.md states.
//
// Usage: placement_bench [--model tiny|small] [--steps N] [--warmup W] [--pairs P]
//                        [--threads T] [--run-dir DIR]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "bench/bench_models.h"
#include "bench/stats.h"
#include "comm/communicator.h"
#include "engine/stage_worker.h"
#include "kernels/cpu/gemm.h"

using namespace troupe;

namespace {

struct Options {
  std::string model = "small";
  int steps = 12, warmup = 3, pairs = 5, threads = 2;
  std::string run_dir = (std::filesystem::temp_directory_path() / "troupe-placement-bench").string();
};

// runtime_bench's models with a global batch of 32 in microbatches of 4.
Config model_config(const Options& o) {
  Config c;
  bench::set_model_shape(c, o.model);  // bench/bench_models.h
  auto* b = c.mutable_batch();
  b->set_micro_batch_size(4);
  b->set_global_batch_size(32);
  c.mutable_optimizer()->set_lr(1e-3);
  c.mutable_optimizer()->set_min_lr(1e-4);
  c.mutable_lr_schedule()->set_warmup_samples(32);
  c.mutable_training()->set_train_samples(int64_t(o.steps) * 32);
  c.mutable_device()->set_threads(o.threads);
  c.mutable_checkpoint()->set_save_on_exit(false);
  c.mutable_checkpoint()->set_interval_steps(0);
  c.mutable_logging()->set_tensorboard(false);
  return c;
}

actors::RunResult run(Config c, const std::string& name, const Options& o) {
  c.mutable_logging()->set_run_dir(o.run_dir + "/" + name);
  actors::RunOptions ro;
  ro.console = false;
  auto r = actors::run_training(c, ro);
  if (r.outcome.status != "completed") {
    std::fprintf(stderr, "placement_bench: %s failed: %s\n", name.c_str(), r.outcome.error.c_str());
    std::exit(1);
  }
  return r;
}

double median_step(const actors::RunResult& r, const Options& o) {
  std::vector<double> t;
  for (size_t s = size_t(o.warmup); s < r.outcome.steps.size(); ++s) t.push_back(r.outcome.steps[s].step_time_s);
  return bench::median(t);
}

const metrics::StageMemoryRecord& stage0_memory(const actors::RunResult& r) {
  for (const auto& m : r.outcome.steps.back().stage_memory)
    if (m.stage == "stage/dp0/pp0/tp0") return m;
  std::fprintf(stderr, "placement_bench: no memory record of stage/dp0/pp0/tp0\n");
  std::exit(1);
}

double mb(int64_t bytes) { return double(bytes) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "placement_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--steps") o.steps = std::stoi(next());
    else if (a == "--warmup") o.warmup = std::stoi(next());
    else if (a == "--pairs") o.pairs = std::stoi(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--run-dir") o.run_dir = next();
    else {
      std::fprintf(stderr, "usage: placement_bench [--model tiny|small] [--steps N] [--warmup W] [--pairs P] "
                           "[--threads T] [--run-dir DIR]\n");
      return 2;
    }
  }
  if (o.model != "tiny" && o.model != "small") {
    std::fprintf(stderr, "placement_bench: --model is tiny or small, got %s\n", o.model.c_str());
    return 2;
  }
  std::printf("placement_bench: model %s, global batch 32 in microbatches of 4, %d steps (median after %d), %d "
              "thread(s); %s\n",
              o.model.c_str(), o.steps, o.warmup, o.threads, kernels::cpu::compute_description().c_str());

  // 1. Throughput.
  Config dp1 = model_config(o);
  Config hosted = dp1;
  hosted.mutable_parallel()->set_data(4);
  hosted.mutable_parallel()->set_physical_replicas(1);
  std::vector<double> a, b, ratio;
  for (int p = 0; p < o.pairs; ++p) {
    a.push_back(median_step(run(dp1, "dp1", o), o));
    b.push_back(median_step(run(hosted, "dp4-on-1", o), o));
    ratio.push_back(b.back() / a.back());
    std::printf("  pair %d: DP1 %.4f s/step, logical DP4 on 1 physical %.4f s/step, ratio %.3f\n", p + 1, a.back(),
                b.back(), ratio.back());
  }
  std::printf("throughput: DP1 median %.4f s/step, logical DP4 on 1 physical median %.4f s/step; median ratio %.3f "
              "(goal: at most 1.05)\n",
              bench::median(a), bench::median(b), bench::median(ratio));

  // 2. Memory of a worker hosting k of DP4's replicas.
  Config short_run = hosted;
  short_run.mutable_training()->set_train_samples(2 * 32);
  const auto n = int64_t(engine::stage_registry(short_run, {0, 0, 0}).total());
  std::printf("memory of the worker computing logical replica 0 (W = %.2f MB of fp32 weights):\n", mb(4 * n));
  for (const int physical : {4, 2, 1}) {
    Config c = short_run;
    c.mutable_parallel()->set_physical_replicas(physical);
    const auto& m = stage0_memory(run(c, "memory-" + std::to_string(physical), o));
    const int k = 4 / physical;
    int64_t owned = 0;
    for (int d = 0; d < 4; d += physical) owned += int64_t(comm::chunk_range(size_t(n), 4, d).size());
    const int64_t stated = 4 * n + 4 * n + (k > 1 ? 4 * owned : 0) + 8 * owned + m.planned_activations + m.scratch;
    std::printf("  hosting %d: weights %.2f, gradients %.2f, Adam %.2f, activations %.2f, scratch %.2f = %.2f MB; "
                "stated W + W (1 + %s) + 2W %d/4 + activations + scratch = %.2f MB\n",
                k, mb(m.weights), mb(m.gradients), mb(m.optimizer_state), mb(m.activations), mb(m.scratch),
                mb(m.peak()), k > 1 ? (std::to_string(k) + "/4").c_str() : "0", k, mb(stated));
  }
  return 0;
}
