// bench/runtime_bench: what the actor runtime costs and how well its pipeline fills.
//
// 1. Runtime overhead: the same model and batches trained DP1 x PP1 through the
//    actors (supervisor, coordinator, loader, stage, optimizer shard, metrics) and by
//    the compute core in a plain loop (optim::ReferenceTrainer), both with the same
//    compute threads. Median step time after warm-up; goal: actors at most 5% slower.
// 2. Pipeline idle: PP2, 8 microbatches, 1F1B, balanced stages (a small vocabulary so
//    the head does not weigh on the last stage), one compute thread per stage. Idle =
//    1 - busy / (stages x span) from every op's busy interval; goal: within 5 points
//    of the ideal (p-1)/(m+p-1) = 1/9.
//
// Usage: runtime_bench [--steps N] [--warmup W] [--threads T] [--run-dir DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "optim/reference_trainer.h"
#include "sched/pipeline_schedule.h"

using namespace troupe;

namespace {

struct Options {
  int steps = 20;
  int warmup = 3;
  int threads = 2;
  std::string run_dir = (std::filesystem::temp_directory_path() / "troupe-runtime-bench").string();
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Config model_config(const std::string& name, const Options& o) {
  Config c;
  auto* m = c.mutable_model();
  auto* b = c.mutable_batch();
  if (name == "tiny") {  // issue 3's tiny: 2 layers, 4 heads, width 64, seq 64, batch 8
    m->set_layers(2);
    m->set_heads(4);
    m->set_width(64);
    m->set_vocab_size(257);
    m->set_max_positions(64);
    b->set_seq_length(64);
  } else {  // small: 4 layers, 4 heads, width 256, vocab 4096, seq 128, batch 8
    m->set_layers(4);
    m->set_heads(4);
    m->set_width(256);
    m->set_vocab_size(4096);
    m->set_max_positions(128);
    b->set_seq_length(128);
  }
  b->set_micro_batch_size(8);
  b->set_global_batch_size(8);
  c.mutable_optimizer()->set_lr(1e-3);
  c.mutable_optimizer()->set_min_lr(1e-4);
  c.mutable_lr_schedule()->set_warmup_samples(8);
  c.mutable_training()->set_train_samples(int64_t(o.steps) * 8);
  c.mutable_device()->set_threads(o.threads);
  c.mutable_checkpoint()->set_save_on_exit(false);
  c.mutable_logging()->set_run_dir(o.run_dir + "/" + name);
  c.mutable_logging()->set_tensorboard(false);
  return c;
}

std::vector<double> runtime_step_times(const Config& c, const Options& o, actors::RunResult* out = nullptr) {
  actors::RunOptions ro;
  ro.console = false;
  auto r = actors::run_training(c, ro);
  if (r.outcome.status != "completed") {
    std::fprintf(stderr, "runtime_bench: run failed: %s\n", r.outcome.error.c_str());
    std::exit(1);
  }
  std::vector<double> t;
  for (size_t i = size_t(o.warmup); i < r.outcome.steps.size(); ++i) t.push_back(r.outcome.steps[i].step_time_s);
  if (out) *out = std::move(r);
  return t;
}

std::vector<double> plain_loop_step_times(const Config& c, const Options& o) {
  kernels::cpu::CpuDevice device(o.threads);
  optim::ReferenceTrainer trainer(c, device);
  const auto src = data::BatchSource::open(c);
  const int m = int(config::microbatches_per_replica(c));
  std::vector<double> t;
  for (int s = 0; s < o.steps; ++s) {
    std::vector<data::Microbatch> mbs;
    for (int j = 0; j < m; ++j) mbs.push_back(src.microbatch(int64_t(s) * c.batch().global_batch_size(), 0, j));
    const auto t0 = std::chrono::steady_clock::now();
    trainer.step(mbs);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) t.push_back(dt);
  }
  return t;
}

void overhead(const Options& o) {
  std::printf("## Runtime overhead: DP1 x PP1 through the actors vs the compute core in a plain loop\n\n");
  std::printf("%d steps, first %d excluded, %d compute threads; medians\n\n", o.steps, o.warmup, o.threads);
  std::printf("| config | plain loop (ms/step) | actors (ms/step) | actors / plain |\n| --- | ---: | ---: | ---: |\n");
  for (const char* name : {"tiny", "small"}) {
    const Config c = model_config(name, o);
    // Alternate the two, twice, and keep each one's better median (the machine is shared).
    double plain = 1e30, actors = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      plain = std::min(plain, median(plain_loop_step_times(c, o)));
      actors = std::min(actors, median(runtime_step_times(c, o)));
    }
    std::printf("| %s | %.2f | %.2f | %.3f |\n", name, plain * 1e3, actors * 1e3, actors / plain);
  }
  std::printf("\n");
}

void pipeline_idle(const Options& o) {
  Config c = model_config("small", o);
  c.mutable_model()->set_vocab_size(257);  // balanced stages: a light head
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_parallel()->set_schedule(ParallelConfig::ONE_F_ONE_B);
  c.mutable_batch()->set_micro_batch_size(1);
  c.mutable_batch()->set_global_batch_size(8);
  c.mutable_device()->set_threads(2);  // one compute thread per stage
  c.mutable_logging()->set_run_dir(o.run_dir + "/pipeline");
  actors::RunResult r;
  runtime_step_times(c, o, &r);
  std::vector<double> idle, fwd[2], bwd[2];
  for (size_t s = size_t(o.warmup); s < r.outcome.step_timings.size(); ++s) {
    const auto& ranks = r.outcome.step_timings[s];
    double lo = 1e300, hi = -1e300, busy = 0;
    for (size_t k = 0; k < ranks.size(); ++k)
      for (size_t i = 0; i < ranks[k].busy.size(); ++i) {
        const auto [a, b] = ranks[k].busy[i];
        lo = std::min(lo, a);
        hi = std::max(hi, b);
        busy += b - a;
        (ranks[k].backward[i] ? bwd : fwd)[k].push_back(b - a);
      }
    idle.push_back(1.0 - busy / (double(ranks.size()) * (hi - lo)));
  }
  // The schedule simulated with the measured op times: what the imbalance allows.
  const double f = std::max(median(fwd[0]), median(fwd[1])), b = std::max(median(bwd[0]), median(bwd[1]));
  const auto sim = sched::simulate_schedule(sched::build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, 2, 8), f, b);
  std::printf("## Pipeline idle: PP2, 8 microbatches, 1F1B, one compute thread per stage\n\n");
  std::printf("| quantity | value |\n| --- | ---: |\n");
  std::printf("| measured idle fraction (median over %zu steps) | %.1f%% |\n", idle.size(), 100 * median(idle));
  std::printf("| ideal (p-1)/(m+p-1) | %.1f%% |\n", 100 * sched::ideal_idle_fraction(2, 8));
  std::printf("| simulated with the measured slowest-stage op times | %.1f%% |\n", 100 * sim.idle_fraction);
  std::printf("| forward ms per microbatch, stage 0 / stage 1 | %.2f / %.2f |\n", 1e3 * median(fwd[0]), 1e3 * median(fwd[1]));
  std::printf("| backward ms per microbatch, stage 0 / stage 1 | %.2f / %.2f |\n", 1e3 * median(bwd[0]), 1e3 * median(bwd[1]));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "runtime_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--run-dir") o.run_dir = value();
    else {
      std::fprintf(stderr, "usage: runtime_bench [--steps N] [--warmup W] [--threads T] [--run-dir DIR]\n");
      return 2;
    }
  }
  overhead(o);
  pipeline_idle(o);
  return 0;
}
