// bench/runtime_bench: what the actor runtime costs and how well its pipeline fills.
//
// 1. Runtime overhead: the same model and batches trained DP1 x PP1 through the
//    actors (supervisor, coordinator, loader, stage, optimizer shard, metrics) and by
//    the compute core in a plain loop (engine::ReferenceTrainer), both with the same
//    compute threads. Median step time after warm-up; goal: actors at most 5% slower.
// 2. Pipeline idle: PP2, 8 microbatches, 1F1B and INTERLEAVED_1F1B with 2 chunks a
//    stage, balanced stages (a small vocabulary so the head does not weigh on the last
//    stage), one compute thread per stage. Idle = 1 - busy / (stages x span) from every
//    op's busy interval, beside the closed form ((p-1)/(m+p-1) = 1/9, (p-1)/(vm+p-1) =
//    1/17) and the schedule simulated with the measured op times; goal: within 5 points
//    of the ideal.
//
// 3. Checkpoint overhead: steps that run while a checkpoint is being written against
//    normal steps (time between step completions, so waiting for a lagging checkpoint
//    counts), and the checkpoint's write rate against the disk's sequential write rate
//    measured in the same run. Goal: at most 1.2x a normal step.
// 4. Recovery on the default config: a stage killed mid-run; time from the fault to
//    the first new step, split into detection, restart, reload and re-warm.
// 5. The state mirror's cost per step (tiny, small, GPT-2 124M's shape): off against on,
//    alternated (--pairs, default 5).
//
// Usage: runtime_bench [--steps N] [--warmup W] [--threads T] [--run-dir DIR] [--only PART]
//                      [--model tiny|small] [--pairs N] [--tiny-steps N]  (the overhead part: one
//                      model only, alternations per model, steps of a tiny run)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "actors/runtime.h"
#include "bench/bench_models.h"
#include "config/embedded_default.h"
#include "config/text_format.h"
#include "metrics/jsonl_log.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "engine/reference_trainer.h"
#include "engine/stage_worker.h"
#include "sched/pipeline_schedule.h"
#include "bench/stats.h"

using namespace troupe;

namespace {

struct Options {
  int steps = 20;
  int warmup = 3;
  int threads = 2;
  std::string model;  // overhead: only this model (tiny or small); empty: both
  int pairs = 0;      // overhead: alternations per model (0: 10 for tiny, 2 for small)
  int tiny_steps = 100;  // overhead: steps of a tiny run (its step time: docs/performance.md)
  std::string run_dir = (std::filesystem::temp_directory_path() / "troupe-runtime-bench").string();
};

using troupe::bench::median;

// The q-quantile of v (0 <= q <= 1), linear between neighbouring order statistics.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t i = size_t(at);
  return i + 1 < v.size() ? v[i] + (at - double(i)) * (v[i + 1] - v[i]) : v[i];
}

Config model_config(const std::string& name, const Options& o) {
  Config c;
  troupe::bench::set_model_shape(c, name);  // issue 3's tiny, or small (bench/bench_models.h); batch 8
  auto* b = c.mutable_batch();
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

// Trains `c` through the actors without console output; exits the bench if the run
// does not complete.
actors::RunResult run_actors(const Config& c) {
  actors::RunOptions ro;
  ro.console = false;
  auto r = actors::run_training(c, ro);
  if (r.outcome.status != "completed") {
    std::fprintf(stderr, "runtime_bench: run failed: %s\n", r.outcome.error.c_str());
    std::exit(1);
  }
  return r;
}

// Per step of a DP1 x PP1 run: from the start of its first op on the stage to the
// start of the next step's first op, the period that the step's forward + backward
// (stage_busy) is part of. (The step records' step_time_s runs from one update's end
// to the next: the same period, shifted.)
std::vector<double> stage_step_periods(const actors::RunResult& r, const Options& o) {
  std::vector<double> t;
  const auto& st = r.outcome.step_timings;
  for (size_t s = size_t(o.warmup); s + 1 < st.size(); ++s)
    t.push_back(st[s + 1].at(0).busy.front().first - st[s].at(0).busy.front().first);
  return t;
}

// Per step of a run: the whole step, and its forward + backward part.
struct StepSplit {
  std::vector<double> step, compute, data;  // data: the batch's assembly, part of `step`
};

// Rank 0's forward and backward ops of each measured step (the stage's busy time).
std::vector<double> stage_busy(const actors::RunResult& r, const Options& o) {
  std::vector<double> out;
  for (size_t s = size_t(o.warmup); s < r.outcome.step_timings.size(); ++s) {
    double busy = 0;
    for (const auto& [a, b] : r.outcome.step_timings[s].at(0).busy) busy += b - a;
    out.push_back(busy);
  }
  return out;
}

// The compute core in a plain loop: every step timed whole, its batch's assembly
// included (the actor run's loader does that work on the same cores); then the same
// batches' forward + backward alone (ReferenceTrainer::accumulate), without it.
StepSplit plain_loop_step_times(const Config& c, const Options& o) {
  kernels::cpu::CpuDevice device(o.threads);
  engine::ReferenceTrainer trainer(c, device);
  const auto src = data::BatchSource::open(c);
  const int m = int(config::microbatches_per_replica(c));
  StepSplit t;
  for (int pass = 0; pass < 2; ++pass)
    for (int s = 0; s < o.steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<data::Microbatch> mbs;
      for (int j = 0; j < m; ++j) mbs.push_back(src.microbatch(int64_t(s) * c.batch().global_batch_size(), 0, j));
      if (pass == 0) {
        if (s >= o.warmup) t.data.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        trainer.step(mbs);
      } else {
        t0 = std::chrono::steady_clock::now();
        trainer.accumulate(mbs);
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= o.warmup) (pass == 0 ? t.step : t.compute).push_back(dt);
    }
  return t;
}

void overhead(const Options& o) {
  std::printf("## Runtime overhead: DP1 x PP1 through the actors vs the compute core in a plain loop\n\n");
  std::printf("tiny: %d steps a run, small: %d; first %d excluded; %d compute threads. The two alternate; each pair of "
              "neighbouring runs gives a ratio of medians (the machine's speed drifts by more than the 5%% asked "
              "between runs, much less within a pair). An actor step: from its first op on the stage to the next "
              "step's. Times: each side's best median. The end of a step: the step minus its forward + backward, "
              "step by step (plain: the same step's two passes), median over all pairs' steps; the plain loop's steps include "
              "assembling their batches, which the actor run's loader does on the same cores.\n\n",
              o.tiny_steps, o.steps, o.warmup, o.threads);
  std::printf("| config | pairs | actors / plain, median of pairs [quartiles] (min - max) | plain loop (ms/step) | actors (ms/step) | "
              "forward + backward, plain / actors (ms) | end of a step, plain / actors (ms) | batch assembly, plain (ms) |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const char* name : {"tiny", "small"}) {
    if (!o.model.empty() && o.model != name) continue;
    const bool tiny = std::string(name) == "tiny";
    // Tiny steps are short: 100 steps a run and 10 pairs by default keep the machine's
    // sub-second hiccups out of the medians; small steps are long enough for 2 pairs
    // (the step times: docs/performance.md, "Runtime").
    Options oo = o;
    if (tiny) oo.steps = o.tiny_steps;
    const Config c = model_config(name, oo);
    const int pairs = o.pairs > 0 ? o.pairs : tiny ? 10 : 2;
    double plain = 1e30, actors = 1e30, plain_fb = 1e30, actors_fb = 1e30;
    std::vector<double> ratios, plain_end, actors_end, plain_data;
    for (int rep = 0; rep < pairs; ++rep) {
      const auto p = plain_loop_step_times(c, oo);
      const auto r = run_actors(c);
      const auto periods = stage_step_periods(r, oo);
      const auto busy = stage_busy(r, oo);
      for (size_t i = 0; i < p.step.size(); ++i) plain_end.push_back(p.step[i] - p.compute[i]);
      plain_data.insert(plain_data.end(), p.data.begin(), p.data.end());
      for (size_t i = 0; i < periods.size(); ++i) actors_end.push_back(periods[i] - busy[i]);
      const double a = median(periods);
      ratios.push_back(a / median(p.step));
      plain = std::min(plain, median(p.step));
      plain_fb = std::min(plain_fb, median(p.compute));
      actors = std::min(actors, a);
      actors_fb = std::min(actors_fb, median(busy));
    }
    std::printf("| %s | %d | %.3f [%.3f, %.3f] (%.3f - %.3f) | %.2f | %.2f | %.2f / %.2f | %.2f / %.2f | %.3f |\n", name,
                pairs, median(ratios), quantile(ratios, 0.25), quantile(ratios, 0.75),
                *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()),
                plain * 1e3, actors * 1e3, plain_fb * 1e3,
                actors_fb * 1e3, median(plain_end) * 1e3, median(actors_end) * 1e3, median(plain_data) * 1e3);
  }
  std::printf("\n");
}

// One schedule's measured and simulated idle on PP2 (`v` chunks a stage).
struct IdleRow {
  std::string name;
  double measured = 0, ideal = 0, simulated = 0, step_s = 0;
  double fwd[2] = {0, 0}, bwd[2] = {0, 0}, wgt[2] = {0, 0};  // ms per op (a chunk's op under interleaving)
};

IdleRow pipeline_idle_of(const Options& o, ParallelConfig::Schedule schedule, int v) {
  Config c = model_config("small", o);
  c.mutable_model()->set_vocab_size(257);  // balanced stages: a light head
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_parallel()->set_schedule(schedule);
  c.mutable_parallel()->set_virtual_stages(v);
  c.mutable_batch()->set_micro_batch_size(1);
  c.mutable_batch()->set_global_batch_size(8);
  c.mutable_device()->set_threads(2);  // one compute thread per stage
  c.mutable_logging()->set_run_dir(o.run_dir + "/pipeline");
  std::filesystem::remove_all(c.logging().run_dir());
  const auto r = run_actors(c);
  std::vector<double> idle, fwd[2], bwd[2], wgt[2], step;
  for (size_t s = size_t(o.warmup); s < r.outcome.step_timings.size(); ++s) {
    const auto& ranks = r.outcome.step_timings[s];
    double lo = 1e300, hi = -1e300, busy = 0;
    for (size_t k = 0; k < ranks.size(); ++k)
      for (size_t i = 0; i < ranks[k].busy.size(); ++i) {
        const auto [a, b] = ranks[k].busy[i];
        lo = std::min(lo, a);
        hi = std::max(hi, b);
        busy += b - a;
        const auto kind = sched::OpKind(ranks[k].op_kinds[i]);
        (kind == sched::OpKind::Forward ? fwd : kind == sched::OpKind::Backward ? bwd : wgt)[k].push_back(b - a);
      }
    idle.push_back(1.0 - busy / (double(ranks.size()) * (hi - lo)));
    step.push_back(hi - lo);
  }
  // The schedule simulated with each stage's measured op times (a stage's op = v chunk
  // ops): the idle the imbalance between the stages implies. Measured minus simulated is
  // what the runtime adds (message hops, waiting for a thread, the step's start and end).
  const bool split = schedule == ParallelConfig::ZB_H1;
  auto per_stage = [&](const std::vector<double>* t) {
    return std::vector<double>{v * median(t[0]), v * median(t[1])};
  };
  const auto sim = sched::simulate_schedule(sched::build_pipeline_schedule(c), per_stage(fwd), per_stage(bwd),
                                            split ? per_stage(wgt) : std::vector<double>{0, 0});
  IdleRow row;
  row.name = v > 1 ? "INTERLEAVED_1F1B v=" + std::to_string(v) : ParallelConfig::Schedule_Name(schedule);
  row.measured = median(idle);
  row.ideal = split ? sched::zero_bubble_idle_fraction(2, 8) : sched::ideal_idle_fraction(2, 8, v);
  row.simulated = sim.idle_fraction;
  row.step_s = median(step);
  for (int k = 0; k < 2; ++k) {
    row.fwd[k] = 1e3 * median(fwd[k]);
    row.bwd[k] = 1e3 * median(bwd[k]);
    row.wgt[k] = split ? 1e3 * median(wgt[k]) : 0;
  }
  return row;
}

void pipeline_idle(const Options& o) {
  std::printf("## Pipeline idle: PP2, 8 microbatches, one compute thread per stage (small, vocabulary 257)\n\n");
  std::printf("| schedule | measured idle (median over steps) | ideal closed form | simulated with measured op times | "
              "measured - simulated | ops span per step (ms) | fwd ms stage 0 / 1 | bwd ms stage 0 / 1 | "
              "weight-pass ms stage 0 / 1 |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const auto& [kind, v] : {std::pair{ParallelConfig::GPIPE, 1}, {ParallelConfig::ONE_F_ONE_B, 1},
                                {ParallelConfig::INTERLEAVED_1F1B, 2}, {ParallelConfig::ZB_H1, 1}}) {
    const IdleRow r = pipeline_idle_of(o, kind, v);
    char weight[64] = "-";
    if (kind == ParallelConfig::ZB_H1) std::snprintf(weight, sizeof weight, "%.2f / %.2f", r.wgt[0], r.wgt[1]);
    std::printf("| %s | %.1f%% | %.1f%% | %.1f%% | %.1f points | %.1f | %.2f / %.2f | %.2f / %.2f | %s |\n",
                r.name.c_str(), 100 * r.measured, 100 * r.ideal, 100 * r.simulated, 100 * (r.measured - r.simulated),
                1e3 * r.step_s, r.fwd[0], r.fwd[1], r.bwd[0], r.bwd[1], weight);
  }
  std::printf("\n");
}

// The state mirror's cost (supervision.state_mirror, docs/checkpoints.md): DP1 x PP1 in
// one process, the same run with the mirror off and on, alternated; per run the median
// time from one step's first op to the next's (stage_step_periods). The bytes a step
// mirrors are the shard's payload: parameters and both Adam moments in fp32, 12 bytes a
// parameter (the shard file's header and piece table add under 1 KB).
void mirror_cost(const Options& o) {
  const int pairs = o.pairs > 0 ? o.pairs : 5;
  std::printf("## The state mirror's cost per step: DP1 x PP1, one process, %d threads, %d pairs (off, on) "
              "alternated\n\n",
              o.threads, pairs);
  std::printf("| model | parameters | bytes mirrored a step | off (ms/step, median of runs) | on (ms/step) | on / off, "
              "median of pairs [min - max] |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string name : {"tiny", "small", "gpt2-124m"}) {
    Options oo = o;
    Config base;
    if (name == "gpt2-124m") {
      // GPT-2 124M's layers, width and vocabulary; sequences of 128 (a step of 1,024 on
      // 2 cores takes seconds: the mirror's cost does not depend on the sequence).
      base = model_config("small", o);
      auto* m = base.mutable_model();
      m->set_layers(12);
      m->set_heads(12);
      m->set_width(768);
      m->set_vocab_size(50257);
      m->set_max_positions(1024);
      oo.steps = std::max(o.warmup + 5, 10);
      base.mutable_training()->set_train_samples(int64_t(oo.steps) * 8);
    } else {
      base = model_config(name, o);
    }
    const int64_t params = engine::stage_registry(base, {0, 0, 0}).total();
    std::vector<double> off, on, ratios;
    for (int p = 0; p < pairs; ++p) {
      double period[2] = {0, 0};
      for (const bool mirror : {false, true}) {
        Config c = base;
        c.mutable_supervision()->set_state_mirror(mirror ? SupervisionConfig::STATE_MIRROR_ON
                                                         : SupervisionConfig::STATE_MIRROR_OFF);
        c.mutable_logging()->set_run_dir(o.run_dir + "/mirror-" + name);
        std::filesystem::remove_all(c.logging().run_dir());
        period[mirror] = median(stage_step_periods(run_actors(c), oo));
      }
      off.push_back(period[0]);
      on.push_back(period[1]);
      ratios.push_back(period[1] / period[0]);
    }
    std::printf("| %s | %.2f M | %.1f MB | %.2f | %.2f | %.3f [%.3f - %.3f] |\n", name.c_str(), params / 1e6,
                12.0 * double(params) / 1e6, 1e3 * median(off), 1e3 * median(on), median(ratios),
                *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
    std::fflush(stdout);
  }
  std::printf("\n");
}

// Writes `bytes` in 4 MiB blocks + fsync into `dir`; returns MB/s.
double disk_write_rate(const std::string& dir, int64_t bytes) {
  const std::string path = dir + "/disk-probe.tmp";
  std::vector<char> block(4 << 20, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int64_t done = 0; done < bytes; done += int64_t(block.size()))
    if (::write(fd, block.data(), block.size()) < 0) break;
  ::fsync(fd);
  ::close(fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  return double(bytes) / 1e6 / secs;
}

void checkpoint_overhead(const Options& o) {
  Config c = model_config("small", o);
  const int interval = 5, steps = 40;
  c.mutable_training()->set_train_samples(int64_t(steps) * 8);
  c.mutable_checkpoint()->set_interval_steps(interval);
  c.mutable_checkpoint()->set_keep_last(2);
  c.mutable_logging()->set_run_dir(o.run_dir + "/checkpointing");
  std::filesystem::remove_all(c.logging().run_dir());
  const auto r = run_actors(c);
  // Time between step completions: what a step costs the run, waits included.
  std::vector<double> normal, writing, after;
  const auto& st = r.outcome.steps;
  for (size_t i = 1; i < st.size(); ++i) {
    if (int(i) < o.warmup || st[i].step == steps) continue;
    const double dt = st[i].wall_time - st[i - 1].wall_time;
    const int64_t since_save = (st[i].step - 1) % interval;  // 0: the step right after a save
    (since_save == 0 ? writing : since_save == 1 ? after : normal).push_back(dt);
  }
  // The checkpoints' sizes and write times, from metrics.jsonl.
  std::vector<double> rates;
  int64_t bytes = 0;
  for (const auto& obj : metrics::read_jsonl(c.logging().run_dir() + "/metrics.jsonl").objects)
    if (obj.value("type", "") == "checkpoint") {
      bytes = obj.value("bytes", int64_t(0));
      rates.push_back(double(bytes) / 1e6 / obj.value("seconds", 1.0));
    }
  const double disk = disk_write_rate(c.logging().run_dir(), std::max<int64_t>(bytes, 1 << 20));
  std::printf("## Checkpoint overhead: small model, DP1 x PP1, a checkpoint every %d steps\n\n", interval);
  std::printf("| quantity | value |\n| --- | ---: |\n");
  std::printf("| normal step (median time between completions) | %.1f ms (%zu steps) |\n", 1e3 * median(normal), normal.size());
  std::printf("| step while the checkpoint is written | %.1f ms (%zu steps), %.3fx |\n", 1e3 * median(writing),
              writing.size(), median(writing) / median(normal));
  std::printf("| the step after it (waits if the checkpoint lags more than max_lag_steps) | %.1f ms, %.3fx |\n",
              1e3 * median(after), median(after) / median(normal));
  std::printf("| checkpoint size | %.1f MB |\n", bytes / 1e6);
  std::printf("| checkpoint write rate (snapshot to committed, median of %zu) | %.0f MB/s |\n", rates.size(), median(rates));
  std::printf("| disk sequential write (4 MiB writes + fsync, same size, same run) | %.0f MB/s |\n", disk);
  std::printf("| write rate / disk rate | %.2f |\n\n", median(rates) / disk);
}

void recovery(const Options& o) {
  std::vector<double> detection, restart, reload, rewarm, total;
  for (int rep = 0; rep < 3; ++rep) {
    Config c = config::load_config_text(config::embedded_default_text(), "configs/default.textproto");
    c.mutable_training()->set_train_samples(20 * 16);
    c.mutable_training()->set_eval_samples(0);
    c.mutable_checkpoint()->set_interval_steps(5);
    c.mutable_logging()->set_run_dir(o.run_dir + "/recovery");
    c.mutable_logging()->set_tensorboard(false);
    std::filesystem::remove_all(c.logging().run_dir());
    auto* f = c.mutable_faults()->add_fault();
    f->set_actor("stage/dp1/pp0/tp0");
    f->set_step(13);
    f->set_phase(Fault::BACKWARD);
    actors::RunOptions ro;
    ro.console = false;
    const auto r = actors::run_training(c, ro);
    if (r.recoveries.empty()) {
      std::fprintf(stderr, "runtime_bench: no recovery recorded (%s)\n", r.outcome.error.c_str());
      std::exit(1);
    }
    const auto& x = r.recoveries[0];
    detection.push_back(x.detection_s);
    restart.push_back(x.restart_s);
    reload.push_back(x.reload_s);
    rewarm.push_back(x.rewarm_s);
    total.push_back(x.total_s());
  }
  std::printf("## Recovery: the default config (DP2 x PP2), stage/dp1/pp0/tp0 killed in step 13's backward\n\n");
  std::printf("Checkpoint every 5 steps (resumes from step 10); medians of 3 runs.\n\n");
  std::printf("| phase | seconds |\n| --- | ---: |\n");
  std::printf("| detection (fault -> supervisor sees the failure) | %.4f |\n", median(detection));
  std::printf("| restart (old group stopped, new one spawned) | %.4f |\n", median(restart));
  std::printf("| reload (members built, checkpoint loaded and verified, wired) | %.4f |\n", median(reload));
  std::printf("| re-warm (first step after the restart) | %.4f |\n", median(rewarm));
  std::printf("| kill to first new step | %.4f |\n\n", median(total));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string only;
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
    else if (a == "--only") only = value();
    else if (a == "--model") o.model = value();
    else if (a == "--pairs") o.pairs = std::stoi(value());
    else if (a == "--tiny-steps") o.tiny_steps = std::stoi(value());
    else {
      std::fprintf(stderr,
                   "usage: runtime_bench [--steps N] [--warmup W] [--threads T] [--run-dir DIR] "
                   "[--only overhead|pipeline|checkpoint|recovery|mirror] [--model tiny|small] [--pairs N] [--tiny-steps N]\n");
      return 2;
    }
  }
  if (o.tiny_steps < o.warmup + 3 || o.steps < o.warmup + 3 || o.pairs < 0) {
    std::fprintf(stderr, "runtime_bench: --steps and --tiny-steps must be at least --warmup + 3 (%d), --pairs >= 1\n",
                 o.warmup + 3);
    return 2;
  }
  if (!o.model.empty() && o.model != "tiny" && o.model != "small") {
    std::fprintf(stderr, "runtime_bench: --model %s: expected tiny or small\n", o.model.c_str());
    return 2;
  }
  if (only.empty() || only == "overhead") overhead(o);
  if (only.empty() || only == "pipeline") pipeline_idle(o);
  if (only.empty() || only == "checkpoint") checkpoint_overhead(o);
  if (only.empty() || only == "recovery") recovery(o);
  if (only.empty() || only == "mirror") mirror_cost(o);
  return 0;
}
