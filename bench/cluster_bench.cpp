// bench/cluster_bench: what running across processes costs (cluster mode,
// docs/cluster.md), on loopback. This process is the supervisor (run_training with a
// listen address); it starts `supervisor worker` processes of the binary given at
// build time and reaps every one of them.
//
// 1. Communication share of a DP2 step across two worker processes: for every rank
//    and step after warm-up, the stage's time in the gradient reduce-scatter and
//    parameter all-gather (StageTiming::sync_s, Gloo over TCP) divided by the step
//    time; the same in one process (in-process communicators) for comparison.
// 2. Worker death to first resumed step: DP2 on two workers plus a hot spare; the
//    worker hosting replica 1 kills itself (SIGKILL) in the backward of a step; the
//    run's recovery record splits the time from the kill to the first step done
//    after the restart into detection (connection dropped), restart (old group
//    stopped, the spare given the ranks, actors placed), reload and re-warm.
// 3. Strangers on the port: the DP2 cluster run with and without a thread that, for
//    the whole run, keeps opening connections without the secret (random bytes, an
//    HTTP request, a header declaring 2^32-1 bytes, silent ones held until the gate's
//    deadline); median step time and the supervisor's peak RSS of each (docs/cluster.md).
//
// Usage: cluster_bench [--steps N] [--warmup W] [--reps R] [--run-dir DIR]
//                      [--only share|recovery|strangers]
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/runtime.h"
#include "test/cluster/loopback.h"
#include "test/cluster/worker_launcher.h"
#include "bench/stats.h"

using namespace troupe;

namespace {

struct Options {
  int steps = 12;
  int warmup = 2;
  int reps = 3;
  std::string run_dir = (std::filesystem::temp_directory_path() / "troupe-cluster-bench").string();
};

const std::string kSecret = "cluster-bench-secret-0123456789abcdef";

using troupe::bench::median;

// runtime_bench's "small" model (4 layers, width 256, vocab 4096, seq 128) as DP2:
// 16 sequences per step, 2 microbatches of 4 per replica, one compute thread per rank.
Config dp2_config(const Options& o, const std::string& name, int workers, int spares) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(4);
  m->set_heads(4);
  m->set_width(256);
  m->set_vocab_size(4096);
  m->set_max_positions(128);
  auto* b = c.mutable_batch();
  b->set_seq_length(128);
  b->set_micro_batch_size(4);
  b->set_global_batch_size(16);
  c.mutable_parallel()->set_data(2);
  c.mutable_optimizer()->set_lr(1e-3);
  c.mutable_optimizer()->set_min_lr(1e-4);
  c.mutable_lr_schedule()->set_warmup_samples(16);
  c.mutable_training()->set_train_samples(int64_t(o.steps) * 16);
  c.mutable_device()->set_threads(1);
  c.mutable_checkpoint()->set_save_on_exit(false);
  c.mutable_logging()->set_run_dir(o.run_dir + "/" + name);
  c.mutable_logging()->set_tensorboard(false);
  c.mutable_logging()->set_progress_bar(false);
  std::filesystem::remove_all(c.logging().run_dir());
  if (workers > 0) {
    auto* k = c.mutable_cluster();
    k->set_workers(workers);
    k->set_spares(spares);
    k->set_heartbeat_interval_s(0.2);
    k->set_connection_timeout_s(2);
    k->set_worker_wait_s(60);
  }
  return c;
}

// Runs `c` in one process, or as the supervisor of `workers` worker processes;
// `on_port` (cluster mode) is called with the gate's port once it listens.
actors::RunResult run(const Config& c, const Options& o, int workers,
                      const std::function<void(uint16_t)>& on_port = nullptr) {
  actors::RunOptions ro;
  ro.console = false;
  ro.timeout = std::chrono::seconds(600);
  std::vector<pid_t> pids;
  const auto secret_file = o.run_dir + "/secret";
  if (workers > 0) {
    std::filesystem::create_directories(o.run_dir);
    std::ofstream(secret_file) << kSecret << "\n";
    actors::ClusterOptions k;
    k.secret = kSecret;
    k.on_listening = [&](uint16_t port) {
      if (on_port) on_port(port);
      for (int i = 0; i < workers; ++i)
        pids.push_back(testing::launch_process(TROUPE_SUPERVISOR_BIN, testing::worker_args(port, secret_file),
                                               c.logging().run_dir() + "-worker" + std::to_string(i + 1) + ".log"));
    };
    ro.cluster = k;
  }
  actors::RunResult r;
  try {
    r = actors::run_training(c, ro);
  } catch (...) {
    for (pid_t p : pids) testing::reap_process(p, std::chrono::seconds(1));
    throw;
  }
  for (pid_t p : pids) testing::reap_process(p, std::chrono::seconds(20));
  if (r.outcome.status != "completed") {
    std::fprintf(stderr, "cluster_bench: run %s failed: %s\n", c.logging().run_dir().c_str(),
                 r.outcome.error.c_str());
    std::exit(1);
  }
  return r;
}

struct Share {
  std::vector<double> step_s, sync_share, compute_share;
};

void add_share(const actors::RunResult& r, const Options& o, Share& s) {
  const auto& steps = r.outcome.steps;
  for (size_t i = size_t(o.warmup); i < steps.size() && i < r.outcome.step_timings.size(); ++i) {
    const double t = steps[i].step_time_s;
    s.step_s.push_back(t);
    for (const auto& rank : r.outcome.step_timings[i]) {
      s.sync_share.push_back(rank.sync_s / t);
      s.compute_share.push_back(rank.compute_s / t);
    }
  }
}

void share(const Options& o) {
  Share local, cluster;
  // Alternate the two (the machine is shared); pool the steps of every repetition.
  for (int rep = 0; rep < o.reps; ++rep) {
    add_share(run(dp2_config(o, "share-local", 0, 0), o, 0), o, local);
    add_share(run(dp2_config(o, "share-cluster", 2, 0), o, 2), o, cluster);
  }
  std::printf("## DP2 step: one process vs two worker processes (Gloo over loopback TCP)\n\n");
  std::printf("Model 4 layers, width 256, vocab 4096, seq 128; 16 sequences per step (2 microbatches of 4 per\n");
  std::printf("replica), one compute thread per rank; %d steps per run, first %d excluded, %d runs of each,\n",
              o.steps, o.warmup, o.reps);
  std::printf("medians over steps (and ranks for the shares).\n\n");
  std::printf("| layout | step (ms) | in gradient reduce-scatter + all-gather | in compute |\n");
  std::printf("| --- | ---: | ---: | ---: |\n");
  std::printf("| DP2 in one process | %.1f | %.1f%% | %.1f%% |\n", 1e3 * median(local.step_s),
              100 * median(local.sync_share), 100 * median(local.compute_share));
  std::printf("| DP2 across 2 worker processes | %.1f | %.1f%% | %.1f%% |\n\n", 1e3 * median(cluster.step_s),
              100 * median(cluster.sync_share), 100 * median(cluster.compute_share));
}

// One kind of recovery from a worker's death: each figure once per run measured.
struct RecoveryTimes {
  std::vector<double> detection, restart, reload, rewarm, total, recomputed, after_step_s, before_step_s;
};

// How a run gets over a worker's death: a spare takes the lost ranks, or the run shrinks
// onto the survivor; either resumes from the state mirror in memory (on by default with
// two physical replicas) or, with the mirror off, from the newest checkpoint on disk.
enum class Recovery { SpareMirror, ShrinkMirror, ShrinkCheckpoint };

// One run of DP2 whose worker hosting replica 1 SIGKILLs itself in `kill_step`'s backward,
// its figures appended to `t`: with a spare (workers 2 + 1) it takes the lost ranks,
// without one (workers 2 + 0) the run shrinks to 1 physical replica on the survivor
// (cluster.on_no_spare SHRINK).
void measure_recovery(const Options& o, Recovery kind, int64_t kill_step, RecoveryTimes& t) {
  const bool spare = kind == Recovery::SpareMirror;
  const char* name = spare ? "recovery-spare" : kind == Recovery::ShrinkMirror ? "recovery-shrink" : "recovery-restart";
  Config c = dp2_config(o, name, 2, spare ? 1 : 0);
  // A checkpoint every 8 steps and the kill in step 16's backward (--steps 20): the
  // newest checkpoint is step 8's, so a restart from disk computes steps 9-15 again.
  c.mutable_checkpoint()->set_interval_steps(8);
  c.mutable_supervision()->set_state_mirror(kind == Recovery::ShrinkCheckpoint ? SupervisionConfig::STATE_MIRROR_OFF
                                                                                : SupervisionConfig::STATE_MIRROR_ON);
  auto* f = c.mutable_faults()->add_fault();
  f->set_actor("stage/dp1/pp0/tp0");
  f->set_step(kill_step);
  f->set_phase(Fault::BACKWARD);
  f->set_kind(Fault::KILL_PROCESS);
  const auto r = run(c, o, spare ? 3 : 2);
  const bool shrunk = r.quarantine.size() == 1 && r.quarantine[0].shrunk_to == 1;
  if (r.outcome.status != "completed" || r.recoveries.size() != 1 || r.quarantine.size() != 1 ||
      (!spare && !shrunk)) {
    std::fprintf(stderr,
                 "cluster_bench: expected a completed run with one recovery and one quarantined worker%s, got "
                 "status %s, %zu and %zu\n",
                 spare ? "" : " (shrunk to 1 physical replica)", r.outcome.status.c_str(), r.recoveries.size(),
                 r.quarantine.size());
    std::exit(1);
  }
  const auto& x = r.recoveries[0];
  t.detection.push_back(x.detection_s);
  t.restart.push_back(x.restart_s);
  t.reload.push_back(x.reload_s);
  t.rewarm.push_back(x.rewarm_s);
  t.total.push_back(x.total_s());
  t.recomputed.push_back(double(r.recomputed_steps));
  // Step times before the kill (the steps never computed again) and after the first
  // resumed step (which is re-warm).
  std::vector<double> before, after;
  for (const auto& step : r.outcome.steps) {
    if (step.step > o.warmup && step.step < kill_step && !step.recomputed) before.push_back(step.step_time_s);
    if (step.step > kill_step + 1) after.push_back(step.step_time_s);
  }
  t.before_step_s.push_back(median(before));
  t.after_step_s.push_back(median(after));
}

void recovery(const Options& o) {
  const int64_t kill_step = std::max(10, o.steps - 4);
  // Alternated in one run of the bench, so that all three see the same machine.
  RecoveryTimes spare, shrink, restart;
  for (int rep = 0; rep < o.reps; ++rep) {
    measure_recovery(o, Recovery::SpareMirror, kill_step, spare);
    measure_recovery(o, Recovery::ShrinkMirror, kill_step, shrink);
    measure_recovery(o, Recovery::ShrinkCheckpoint, kill_step, restart);
  }
  std::printf("## Worker death to the first resumed step: DP2 on 2 workers, with a spare and without (shrink),\n");
  std::printf("## from the state mirror in memory and from the checkpoint on disk\n\n");
  std::printf("The worker hosting replica 1 SIGKILLs itself in step %lld's backward; checkpoint every 8 steps;\n",
              static_cast<long long>(kill_step));
  std::printf("heartbeat 0.2 s, connection timeout 2 s. With a spare (2 workers + 1) it takes the lost ranks;\n");
  std::printf("without one (2 + 0) the run shrinks to 1 physical replica computing both logical ones on the\n");
  std::printf("survivor (cluster.on_no_spare SHRINK); the state mirror on (the default here) or off\n");
  std::printf("(supervision.state_mirror). Medians of %d runs of each, alternated.\n\n", o.reps);
  std::printf("| phase | spare, mirror (s) | shrink, mirror (s) | shrink, checkpoint (s) |\n| --- | ---: | ---: | ---: |\n");
  auto row = [](const char* what, const std::vector<double>& a, const std::vector<double>& b,
                const std::vector<double>& c, double scale, const char* fmt) {
    std::printf("| %s | ", what);
    std::printf(fmt, scale * median(a));
    std::printf(" | ");
    std::printf(fmt, scale * median(b));
    std::printf(" | ");
    std::printf(fmt, scale * median(c));
    std::printf(" |\n");
  };
  row("detection (SIGKILL -> the supervisor sees the failure)", spare.detection, shrink.detection, restart.detection, 1,
      "%.4f");
  row("restart (old group stopped, ranks placed again, actors placed)", spare.restart, shrink.restart, restart.restart,
      1, "%.4f");
  row("reload (members built, state fetched or loaded, communicators rebuilt, wired)", spare.reload, shrink.reload,
      restart.reload, 1, "%.4f");
  row("re-warm (first step after the restart)", spare.rewarm, shrink.rewarm, restart.rewarm, 1, "%.4f");
  row("worker death to first resumed step", spare.total, shrink.total, restart.total, 1, "%.4f");
  row("steps computed again (lost to the failure)", spare.recomputed, shrink.recomputed, restart.recomputed, 1, "%.0f");
  row("step time before the kill, DP2 on 2 workers (ms)", spare.before_step_s, shrink.before_step_s,
      restart.before_step_s, 1e3, "%.1f");
  row("step time after the recovery: spare 2 workers, shrink 1 (ms)", spare.after_step_s, shrink.after_step_s,
      restart.after_step_s, 1e3, "%.1f");
  std::printf("\n");
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Until `stop`: every 20 ms one connection to 127.0.0.1:port sends one of the payloads
// and is closed; silent ones are held (at most 32 at a time) until the gate closes them.
void strangers_at(uint16_t port, const std::atomic<bool>& stop, int64_t& connections) {
  std::string huge(26, '\0');
  for (int i = 22; i < 26; ++i) huge[size_t(i)] = char(0xff);
  const std::vector<std::string> payloads{std::string(16 << 10, 'x'), "GET / HTTP/1.1\r\nHost: x\r\n\r\n", huge,
                                          std::string("TRP1\xff\xff", 6), ""};
  std::vector<int> held;
  for (size_t n = 0; !stop.load(); ++n) {
    if (const int fd = testing::dial_loopback(port); fd >= 0) {
      ++connections;
      const auto& p = payloads[n % payloads.size()];
      if (!p.empty()) ::send(fd, p.data(), p.size(), MSG_NOSIGNAL);
      if (p.empty() && held.size() < 32) held.push_back(fd);
      else ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int fd : held) ::close(fd);
}

void strangers(const Options& o) {
  std::vector<double> quiet_steps, busy_steps;
  int64_t quiet_peak = 0, busy_peak = 0, connections = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::ofstream("/proc/self/clear_refs") << "5";
    const auto quiet = run(dp2_config(o, "strangers-quiet", 2, 0), o, 2);
    quiet_peak = std::max(quiet_peak, peak_rss_bytes());
    for (size_t i = size_t(o.warmup); i < quiet.outcome.steps.size(); ++i)
      quiet_steps.push_back(quiet.outcome.steps[i].step_time_s);
    std::ofstream("/proc/self/clear_refs") << "5";
    std::atomic<bool> stop{false};
    std::thread prober;
    const auto busy = run(dp2_config(o, "strangers-busy", 2, 0), o, 2, [&](uint16_t port) {
      prober = std::thread([&, port] { strangers_at(port, stop, connections); });
    });
    stop = true;
    if (prober.joinable()) prober.join();
    busy_peak = std::max(busy_peak, peak_rss_bytes());
    for (size_t i = size_t(o.warmup); i < busy.outcome.steps.size(); ++i)
      busy_steps.push_back(busy.outcome.steps[i].step_time_s);
    if (!busy.quarantine.empty() || busy.restarts != 0) {
      std::fprintf(stderr, "cluster_bench: strangers caused %zu quarantine(s), %lld restart(s)\n",
                   busy.quarantine.size(), static_cast<long long>(busy.restarts));
      std::exit(1);
    }
  }
  std::printf("## Strangers on the port: the DP2 cluster step with and without them\n\n");
  std::printf("%lld connections without the secret over %d run(s) (one every 20 ms: 16 KiB of bytes, HTTP, a\n",
              static_cast<long long>(connections), o.reps);
  std::printf("header declaring 2^32-1, one declaring 65535, silent ones held); medians over steps after %d.\n\n",
              o.warmup);
  std::printf("| run | step (ms) | supervisor peak RSS (MB) |\n| --- | ---: | ---: |\n");
  std::printf("| no strangers | %.1f | %.1f |\n", 1e3 * median(quiet_steps), quiet_peak / 1e6);
  std::printf("| strangers | %.1f | %.1f |\n", 1e3 * median(busy_steps), busy_peak / 1e6);
  std::printf("| ratio | %.3f | |\n\n", median(busy_steps) / median(quiet_steps));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cluster_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--reps") o.reps = std::stoi(value());
    else if (a == "--run-dir") o.run_dir = value();
    else if (a == "--only") only = value();
    else {
      std::fprintf(stderr,
                   "usage: cluster_bench [--steps N] [--warmup W] [--reps R] [--run-dir DIR] "
                   "[--only share|recovery|strangers]\n");
      return 2;
    }
  }
  if (o.steps < o.warmup + 2 || o.reps < 1) {
    std::fprintf(stderr, "cluster_bench: need --steps >= --warmup + 2 and --reps >= 1\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);  // the tables only (workers log to RUN_DIR-workerN.log)
  if (only.empty() || only == "share") share(o);
  if (only.empty() || only == "recovery") recovery(o);
  if (only.empty() || only == "strangers") strangers(o);
  return 0;
}
