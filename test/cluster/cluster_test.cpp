// The supervision tree across processes (docs/cluster.md), on loopback: the test
// process is the supervisor (run_training with a listen address) and starts the
// binary's `supervisor worker` processes. Every worker process is reaped with a bound
// (killed past it), so the suite ends by itself.
//
// What is compared: final weights and both Adam moments of a cluster run against the
// in-process run of the same config, bitwise (memcmp). The Gloo communicators add in
// rank order exactly as the in-process ones do (docs/comm.md), every other sum runs in
// the coordinator's fixed order, and each stage gets the same thread count, so there is
// nothing that may differ.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "actors/runtime.h"
#include "actors/cluster/worker_process.h"
#include "ckpt/reader.h"
#include "ckpt/commit.h"
#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "metrics/json.h"
#include "test/actors/parity_check.h"
#include "test/cluster/cluster_harness.h"
#include "test/cluster/worker_launcher.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::cluster_harness;
namespace fs = std::filesystem;

TEST_CASE("2 workers x DP2: bitwise the in-process run") { check_parity(tiny("dp2", 2, 1, 2), 2); }

TEST_CASE("2 workers x PP2: activations over Gloo, bitwise the in-process run") {
  check_parity(tiny("pp2", 1, 2, 2), 2);
}

TEST_CASE("2 workers x DP2 x PP2 placed BY_STAGE: two ranks per worker, bitwise the in-process run") {
  // Worker 0 hosts stage 0 of both replicas, worker 1 stage 1: every activation, the
  // tied-embedding all-reduce and nothing of the DP groups cross processes; each worker
  // connects two ranks' groups at once.
  Config c = tiny("dp2pp2", 2, 2, 2);
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  check_parity(c, 2);
}

TEST_CASE("logical DP4 x PP2 on 2 physical replicas, one per worker: the ordered reduction over Gloo, bitwise the "
          "in-process run on 4") {
  // Each worker hosts one physical replica (both stages) computing logical replicas q
  // and q + 2 in turn; every turn's gradient shards cross to their owner in the other
  // process (docs/layout.md). Against the unplaced in-process run: the placement
  // changes no bit.
  Config c = tiny("dp4on2", 4, 2, 2);
  c.mutable_parallel()->set_physical_replicas(2);
  c.mutable_model()->set_hidden_dropout(0.1f);
  Config unplaced = local_of(c);
  unplaced.mutable_parallel()->set_physical_replicas(4);
  const auto want = testing::run(unplaced);
  check_matches(run_cluster(c, 2), want);
}

TEST_CASE("logical DP4 x PP2 on 2 physical replicas placed BY_STAGE: hosted stages with their pipeline neighbour in "
          "the other process, bitwise the in-process run on 4") {
  Config c = tiny("dp4on2-by-stage", 4, 2, 2);
  c.mutable_parallel()->set_physical_replicas(2);
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  Config unplaced = local_of(c);
  unplaced.mutable_parallel()->set_physical_replicas(4);
  const auto want = testing::run(unplaced);
  check_matches(run_cluster(c, 2), want);
}

TEST_CASE("logical DP2 x TP2 x PP2 (a Llama, sequence parallel) on 1 physical replica placed BY_STAGE: each worker "
          "hosts a stage's tensor-parallel pair for both replicas, bitwise the in-process run on 2") {
  // Worker 0 holds stage 0's two tensor-parallel ranks, worker 1 stage 1's; each computes
  // logical replicas 0 and 1 in turn, its TP group inside the process, the activations
  // and the ordered reduction's shards over Gloo.
  Config c = testing::as_llama(tiny("dp2tp2pp2on1", 2, 2, 2));
  c.mutable_parallel()->set_tensor(2);
  c.mutable_parallel()->set_sequence_parallel(true);
  c.mutable_parallel()->set_physical_replicas(1);
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  Config unplaced = local_of(c);
  unplaced.mutable_parallel()->set_physical_replicas(2);
  const auto want = testing::run(unplaced);
  check_matches(run_cluster(c, 2), want);
}

TEST_CASE("a cluster resume keeps skipping its checkpoint's samples: the loaders on the workers get the run state's "
          "list") {
  // Two steps in process skipping two samples of the third step's global batch, saved at
  // step 2; the resume's config names no skip: the checkpoint's list (the run state,
  // engine/run_state.h) reaches the loaders on the workers in their placement messages.
  Config c = tiny("skips", 2, 1, 2);
  Config first = local_of(c);
  first.mutable_logging()->set_run_dir(first.logging().run_dir() + "-first");
  for (const auto* suffix : {"-first", "-whole", "-whole-none"}) fs::remove_all(local_of(c).logging().run_dir() + suffix);
  first.mutable_training()->set_train_samples(16);
  first.mutable_checkpoint()->set_save_on_exit(true);
  const auto order = data::BatchSource::open(first);
  for (const int64_t position : {17, 21}) first.mutable_data()->add_skip_samples(order.sample_at(position));
  REQUIRE(testing::run(first).outcome.status == "completed");
  const auto saved = fs::path(engine::checkpoint_root(first)) / ckpt::step_dir_name(2);
  REQUIRE(fs::exists(saved));

  c.mutable_checkpoint()->set_load(saved.string());
  const auto want = testing::run(local_of(c));
  REQUIRE(want.outcome.steps.size() == 1);
  // The same run from the start with the list configured: the resume skipped the same.
  Config whole = local_of(c);
  whole.mutable_logging()->set_run_dir(whole.logging().run_dir() + "-whole");
  whole.mutable_checkpoint()->set_load("");
  *whole.mutable_data()->mutable_skip_samples() = first.data().skip_samples();
  const auto uninterrupted = testing::run(whole);
  REQUIRE(uninterrupted.outcome.steps.size() == 3);
  CHECK(uninterrupted.outcome.steps[2].loss == want.outcome.steps[0].loss);
  // Without the list the third step reads other samples.
  whole.mutable_logging()->set_run_dir(whole.logging().run_dir() + "-none");
  whole.mutable_data()->clear_skip_samples();
  CHECK(testing::run(whole).outcome.steps[2].loss != want.outcome.steps[0].loss);

  check_matches(run_cluster(c, 2), want);
}

TEST_CASE("a SIGKILLed worker is replaced by the spare; the run finishes bitwise the fault-free run") {
  Config c = tiny("kill", 2, 1, 2, 1);
  c.mutable_checkpoint()->set_interval_steps(1);
  // The worker hosting replica 1 kills itself (SIGKILL) in the backward of step 2.
  *c.mutable_faults()->add_fault() = fault("stage/dp1/pp0/tp0", 2, Fault::BACKWARD, Fault::KILL_PROCESS);
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, 3);
  check_matches(run, want);
  CHECK(run.result.restarts == 1);
  // Quarantine: the dead worker, with its time and error, replaced by the spare.
  REQUIRE(run.result.quarantine.size() == 1);
  const auto& q = run.result.quarantine[0];
  CHECK(q.position == 1);
  CHECK(q.replaced_by > 0);
  CHECK(q.replaced_by != q.worker_id);
  CHECK(q.unix_time > 0);
  CHECK(q.error.find("connection") != std::string::npos);
  int killed = 0, clean = 0;
  for (const auto& w : run.workers) {
    if (!w.killed && WIFSIGNALED(w.status) && WTERMSIG(w.status) == SIGKILL) ++killed;
    if (exited_with(w, 0)) ++clean;
  }
  CHECK(killed == 1);
  CHECK(clean == 2);
  // The dead worker never got ranks again: the quarantined one is the one killed.
  for (const auto& w : run.result.workers)
    if (w.id == q.worker_id) CHECK(w.role == actors::WorkerRecord::Role::Quarantined);
}

TEST_CASE("a hung worker (SIGSTOP) is found by the heartbeat and replaced") {
  Config c = tiny("hang", 2, 1, 2, 1);
  c.mutable_checkpoint()->set_interval_steps(1);
  *c.mutable_faults()->add_fault() = fault("stage/dp0/pp0/tp0", 2, Fault::FORWARD, Fault::STOP_PROCESS);
  // A collective would time out only after 91 s and the step watchdog after 60 s: a
  // recovery well before either is the heartbeat's doing.
  c.mutable_supervision()->set_step_watchdog_s(60);
  const auto want = testing::run(local_of(c));
  // The stopped process never ends by itself: the harness kills it once the run is over.
  const auto run = run_cluster(c, 3, true);
  INFO(run.logs());
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  check_same_state(*run.result.state, *want.state);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].position == 0);
  CHECK(run.result.quarantine[0].replaced_by > 0);
  REQUIRE(run.result.recoveries.size() == 1);
  // From the stop to the failure seen: about cluster.connection_timeout_s (2 s).
  CHECK(run.result.recoveries[0].detection_s > 1.0);
  CHECK(run.result.recoveries[0].detection_s < 20.0);
  // The stopped process stayed stopped until the run was over and was killed then; the
  // others left by themselves.
  int stopped = 0;
  for (const auto& w : run.workers) stopped += w.killed;
  CHECK(stopped == 1);
}

TEST_CASE("with no spare left and cluster.on_no_spare STOP the run stops with the report and the checkpoint intact") {
  Config c = tiny("nospare", 2, 1, 2, 0);
  c.mutable_cluster()->set_on_no_spare(ClusterConfig::STOP);
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(0);  // step 2's checkpoint is committed before step 3 starts
  *c.mutable_faults()->add_fault() = fault("optim/dp1/pp0/tp0", 3, Fault::REDUCE, Fault::KILL_PROCESS);
  const auto run = run_cluster(c, 2, /*collect_state=*/false);
  INFO(run.logs());
  CHECK(run.result.outcome.status == "failed");
  REQUIRE(run.result.failure.has_value());
  CHECK(run.result.failure->vetoed.find("no spare") != std::string::npos);
  CHECK(run.result.failure->vetoed.find("the run cannot shrink: cluster.on_no_spare is STOP") != std::string::npos);
  CHECK(run.result.exit_code() == 1);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].replaced_by == -1);
  CHECK(run.result.quarantine[0].shrunk_to == -1);
  // The latest complete checkpoint is step 2's, and it verifies.
  const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
  REQUIRE(latest.checkpoint.has_value());
  CHECK(latest.checkpoint->step() == 2);
  int clean = 0;
  for (const auto& w : run.workers) clean += exited_with(w, 0);
  CHECK(clean == 1);
}

// Shrinking onto the survivors (docs/cluster.md): the logical layout is placed again on
// fewer physical replicas and the group restarts from the newest checkpoint. Against the
// fault-free in-process run: the numbers depend on the logical layout alone.
TEST_CASE("a lost worker with no spare: DP2 shrinks onto the survivor and finishes bitwise the fault-free run") {
  Config c = tiny("shrink-dp2", 2, 1, 2, 0);
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(0);
  *c.mutable_faults()->add_fault() = fault("optim/dp1/pp0/tp0", 3, Fault::REDUCE, Fault::KILL_PROCESS);
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, 2);
  check_matches(run, want);
  CHECK(run.result.restarts == 1);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].replaced_by == -1);
  CHECK(run.result.quarantine[0].shrunk_to == 1);
  // The checkpoints after the loss were written by the one physical replica left.
  const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
  REQUIRE(latest.checkpoint.has_value());
  CHECK(latest.checkpoint->step() == int64_t(want.outcome.steps.size()));
  CHECK(latest.checkpoint->manifest().topology().data() == 2);
  CHECK(latest.checkpoint->manifest().topology().physical_replicas() == 1);
  // metrics.jsonl's recovery line names the placement the group came back on.
  std::vector<int64_t> recovered_on;
  std::ifstream in(fs::path(c.logging().run_dir()) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (line.find("\"type\":\"recovery\"") != std::string::npos)
      recovered_on.push_back(metrics::Json::parse(line).at("physical_replicas").get<int64_t>());
  CHECK(recovered_on == std::vector<int64_t>{1});
  int clean = 0;
  for (const auto& w : run.workers) clean += exited_with(w, 0);
  CHECK(clean == 1);
}

TEST_CASE("a lost worker with no spare: logical DP4 x PP2 on 4 workers shrinks to fewer physical replicas on 3, "
          "bitwise") {
  Config c = tiny("shrink-dp4", 4, 2, 4, 0);
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(0);
  // The worker of replica 2 (ranks 4 and 5) kills itself in a backward of step 2.
  *c.mutable_faults()->add_fault() = fault("stage/dp2/pp1/tp0", 2, Fault::BACKWARD, Fault::KILL_PROCESS);
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, 4);
  check_matches(run, want);
  REQUIRE(run.result.quarantine.size() == 1);
  const auto& q = run.result.quarantine[0];
  CHECK(q.position == 2);
  CHECK(q.replaced_by == -1);
  // 2 physical replicas (4 physical ranks: blocks of 1, 1, 2 on the 3 survivors) when a
  // survivor hosts 2 ranks; with one slot each, 1 physical replica (2 ranks on 2).
  int32_t most_slots = 0;
  for (const auto& w : run.result.workers)
    if (w.role != actors::WorkerRecord::Role::Quarantined) most_slots = std::max(most_slots, w.slots);
  CHECK(q.shrunk_to == (most_slots >= 2 ? 2 : 1));
  const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
  REQUIRE(latest.checkpoint.has_value());
  CHECK(latest.checkpoint->manifest().topology().physical_replicas() == q.shrunk_to);
}

// The state mirror across workers (docs/checkpoints.md, "The state mirror"): no
// checkpoint before the loss, so without the mirror the shrunk group would start from
// the initial weights; with it, it resumes from the newest step whose every shard a
// live worker holds (the lost worker's on its buddy), fetched over the network.
TEST_CASE("a lost worker with no spare and the state mirror on: DP4 x PP2 shrinks and resumes from the survivors' "
          "memory, bitwise") {
  Config c = tiny("mirror-shrink", 4, 2, 4, 0);
  c.mutable_training()->set_train_samples(48);  // 6 updates
  c.mutable_supervision()->set_state_mirror(SupervisionConfig::STATE_MIRROR_ON);
  // Replica 2's loader holds step 4's microbatches back for 2 s (the mirror asked for by
  // then completes, buddy copy included, whatever else the machine runs); then the worker
  // of replica 2 (ranks 4 and 5) kills itself in a backward of step 4.
  auto hold = fault("loader/dp2", 4, Fault::FORWARD, Fault::DELAY);
  hold.set_delay_s(2);
  *c.mutable_faults()->add_fault() = hold;
  *c.mutable_faults()->add_fault() = fault("stage/dp2/pp1/tp0", 4, Fault::BACKWARD, Fault::KILL_PROCESS);
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, 4);
  check_matches(run, want);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].replaced_by == -1);
  CHECK(run.result.quarantine[0].shrunk_to >= 1);
  // The recovery line: resumed from the mirror of a step after the start (at most 3:
  // step 4 failed), which only the steps after it follow again.
  int recoveries = 0;
  std::ifstream in(fs::path(c.logging().run_dir()) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"recovery\"") == std::string::npos) continue;
    ++recoveries;
    const auto j = metrics::Json::parse(line);
    const int64_t resumed = j.at("resume_step").get<int64_t>();
    CHECK(resumed >= 1);
    CHECK(resumed <= 3);
    CHECK(j.at("resumed_from").get<std::string>() == "memory: the state mirror of step " + std::to_string(resumed));
    CHECK(run.result.recomputed_steps <= 3 - resumed);
  }
  CHECK(recoveries == 1);
  // No checkpoint was ever written (no interval, no save on exit): nothing was read.
  CHECK(!fs::exists(fs::path(engine::checkpoint_root(c)) / "latest"));
}

// Growing back (docs/cluster.md): after the shrink above, a worker that joins makes the
// run grow back to its configured placement at the next step boundary, from a
// checkpoint of that step (no step computed twice). The worker of replica 1 is killed in
// step 3; a third worker is started once the shrunk group has recovered; the
// coordinator sleeps 10 s at step 4's checkpoint (an injected delay) so that it has
// joined before the steps run out.
TEST_CASE("a worker that joins after a shrink: the run grows back to 2 physical replicas, bitwise the fault-free run") {
  Config c = tiny("grow-dp2", 2, 1, 2, 0);
  c.mutable_training()->set_train_samples(64);  // 8 steps
  c.mutable_checkpoint()->set_interval_steps(2);
  c.mutable_checkpoint()->set_max_lag_steps(0);
  *c.mutable_faults()->add_fault() = fault("optim/dp1/pp0/tp0", 3, Fault::REDUCE, Fault::KILL_PROCESS);
  Fault slow = fault("coordinator", 4, Fault::CHECKPOINT_WRITE, Fault::DELAY);
  slow.set_delay_s(10);
  *c.mutable_faults()->add_fault() = slow;
  const auto want = testing::run(local_of(c));  // no faults, one process

  const auto metrics_path = fs::path(c.logging().run_dir()) / "metrics.jsonl";
  const auto has_line = [&](const std::string& type) {
    std::ifstream in(metrics_path);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"" + type + "\"") != std::string::npos) return true;
    return false;
  };
  std::thread joiner;
  std::atomic<pid_t> late{0};
  const auto log = fs::absolute(c.logging().run_dir() + "-worker-late.log").string();
  auto run = run_cluster(c, 2, true, [&](uint16_t port, ClusterRun&) {
    joiner = std::thread([&, port] {
      // Once the shrunk group has completed a step (its recovery line), a third worker joins.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!has_line("recovery") && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      late = testing::launch_process(TROUPE_SUPERVISOR_BIN,
                                     testing::worker_args(port, write_secret("secret", kSecretText)), log);
    });
  });
  joiner.join();
  const int late_status = late ? testing::reap_process(late, std::chrono::seconds(20)) : -1;
  check_matches(run, want);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].shrunk_to == 1);
  CHECK(run.result.restarts == 1);  // the grow is a planned regroup, not a restart
  // The grow line: from 1 to 2 physical replicas, resuming at the step it saved; the
  // checkpoints after it were written by 2 physical replicas again.
  std::vector<metrics::Json> grows;
  {
    std::ifstream in(metrics_path);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"grow\"") != std::string::npos) grows.push_back(metrics::Json::parse(line));
  }
  REQUIRE(grows.size() == 1);
  CHECK(grows[0].at("from_physical_replicas").get<int64_t>() == 1);
  CHECK(grows[0].at("physical_replicas").get<int64_t>() == 2);
  const int64_t resumed = grows[0].at("resume_step").get<int64_t>();
  // Not before the shrunk group's first step (3, whose recovery line starts the joiner);
  // which step after it depends on when the worker joined.
  CHECK(resumed >= 3);
  CHECK(resumed < int64_t(want.outcome.steps.size()));
  const auto at_grow = ckpt::open_step(engine::checkpoint_root(c), resumed);
  CHECK(at_grow.manifest().topology().physical_replicas() == 1);  // saved by the shrunk group
  const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
  REQUIRE(latest.checkpoint.has_value());
  CHECK(latest.checkpoint->step() == int64_t(want.outcome.steps.size()));
  CHECK(latest.checkpoint->manifest().topology().physical_replicas() == 2);
  // From the step the grow saved on, every step ran once: the grow computed none twice.
  std::map<int64_t, int> step_lines;
  {
    std::ifstream in(metrics_path);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"step\"") != std::string::npos)
        ++step_lines[metrics::Json::parse(line).at("step").get<int64_t>()];
  }
  for (int64_t step = resumed; step <= int64_t(want.outcome.steps.size()); ++step) {
    CAPTURE(step);
    CHECK(step_lines[step] == 1);
  }
  CHECK(WIFEXITED(late_status));
  // supervisor inspect --placements tells the same history.
  const auto history = fs::path(c.logging().run_dir()) / "placements.txt";
  const std::string cmd = std::string(TROUPE_SUPERVISOR_BIN) + " inspect " + c.logging().run_dir() +
                          " --placements > " + history.string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(history);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CAPTURE(text);
  CHECK(text.find("start       2 physical replicas") != std::string::npos);
  CHECK(text.find("restart 1 after a failure: on 1 physical replica\n") != std::string::npos);
  CHECK(text.find("grew from 1 to 2 onto a worker that joined (resumed at step " + std::to_string(resumed) + ")") !=
        std::string::npos);
}

TEST_CASE("a lost worker with no spare and no placement above cluster.min_physical_replicas: the run stops") {
  Config c = tiny("shrink-floor", 2, 1, 2, 0);
  c.mutable_cluster()->set_min_physical_replicas(2);
  c.mutable_checkpoint()->set_interval_steps(1);
  *c.mutable_faults()->add_fault() = fault("optim/dp1/pp0/tp0", 3, Fault::REDUCE, Fault::KILL_PROCESS);
  const auto run = run_cluster(c, 2, /*collect_state=*/false);
  INFO(run.logs());
  CHECK(run.result.outcome.status == "failed");
  REQUIRE(run.result.failure.has_value());
  CHECK(run.result.failure->vetoed.find("no placement on fewer than 2 physical replicas (dividing parallel.data = 2, "
                                        "at least cluster.min_physical_replicas = 2) fits the 1 live worker(s)") !=
        std::string::npos);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].shrunk_to == -1);
}

TEST_CASE("workers with a wrong secret, protocol version or config are refused and never get ranks") {
  Config c = tiny("refuse", 1, 1, 1);
  const auto wrong = write_secret("wrong-secret", "00000000000000000000000000000000");
  std::vector<Worker> refused;
  const auto run = run_cluster(c, 1, false, [&](uint16_t port, ClusterRun&) {
    const auto right = (kRoot / "secret").string();
    std::vector<std::vector<std::string>> args{testing::worker_args(port, wrong), testing::worker_args(port, right),
                                               testing::worker_args(port, right)};
    args[1].insert(args[1].end(), {"--protocol", "99"});
    args[2].insert(args[2].end(), {"--set", "training.seed=8"});
    for (size_t i = 0; i < args.size(); ++i) {
      Worker w;
      w.log = (kRoot / ("refused" + std::to_string(i) + ".log")).string();
      fs::remove(w.log);
      w.pid = testing::launch_process(TROUPE_SUPERVISOR_BIN, args[i], w.log);
      refused.push_back(w);
    }
    // Each is refused and exits before the real worker starts.
    for (auto& w : refused) w.status = testing::reap_process(w.pid, std::chrono::seconds(30), &w.killed);
  });
  INFO(run.logs());
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  for (const auto& w : refused) {
    INFO(testing::tail_of(w.log));
    CHECK(exited_with(w, actors::kWorkerRefused));
  }
  REQUIRE(run.result.refusals.size() == 3);
  std::string reasons;
  for (const auto& r : run.result.refusals) reasons += r.reason + "\n";
  INFO(reasons);
  CHECK(reasons.find("wrong secret") != std::string::npos);
  CHECK(reasons.find("protocol version 99") != std::string::npos);
  CHECK(reasons.find("config hash") != std::string::npos);
  // Only the right worker joined.
  CHECK(run.result.workers.size() == 1);
}

TEST_CASE("TLS (anonymous): workers join and train bitwise; a plain worker is refused at the gate") {
  Config c = tiny("tls", 2, 1, 2);
  const auto want = testing::run(local_of(c));
  Worker plain;
  const auto run = run_cluster(
      c, 2, true,
      [&](uint16_t port, ClusterRun&) {
        // Without --tls the worker speaks the plain join protocol to a TLS listener: the
        // gate's TLS handshake fails, and the worker gives up after its connect timeout
        // (2 s), exit 1.
        auto args = testing::worker_args(port, (kRoot / "secret").string());
        const auto at = std::find(args.begin(), args.end(), "--connect-timeout");
        REQUIRE(at != args.end());
        *(at + 1) = "2";
        plain.log = (kRoot / "tls-plain.log").string();
        fs::remove(plain.log);
        plain.pid = testing::launch_process(TROUPE_SUPERVISOR_BIN, args, plain.log);
        plain.status = testing::reap_process(plain.pid, std::chrono::seconds(20), &plain.killed);
      },
      std::chrono::seconds(20), /*tls=*/true);
  INFO(run.logs());
  {
    INFO(testing::tail_of(plain.log));
    CHECK(exited_with(plain, 1));
    CHECK(testing::tail_of(plain.log).find("cannot connect") != std::string::npos);
  }
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  check_same_state(*run.result.state, *want.state);
  CHECK(run.result.workers.size() == 2);
  // Every refusal is the plain worker's failed TLS handshake (one per attempt).
  REQUIRE(!run.result.refusals.empty());
  for (const auto& r : run.result.refusals) CHECK(r.reason.find("TLS handshake failed") != std::string::npos);
  CHECK(run.result.quarantine.empty());
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));
}

TEST_CASE("workers started in another directory resolve the config's relative paths in the supervisor's") {
  // The run directory (and so the checkpoints the workers' writers write) given
  // relative to this process's directory; the workers start elsewhere.
  Config c = tiny("relative", 2, 1, 2);
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(0);  // each committed before the next step
  const auto absolute = fs::path(c.logging().run_dir());
  c.mutable_logging()->set_run_dir(fs::relative(absolute).string());
  REQUIRE(fs::path(c.logging().run_dir()).is_relative());
  // Deeper than this process's directory, so that the relative path read from there
  // names another place.
  auto elsewhere = kRoot / "elsewhere";
  for ([[maybe_unused]] const auto& part : fs::current_path()) elsewhere /= "d";
  fs::create_directories(elsewhere);
  const auto misread = (elsewhere / c.logging().run_dir()).lexically_normal();
  REQUIRE(misread != absolute.lexically_normal());
  Config local = local_of(c);
  local.mutable_logging()->set_run_dir((kRoot / "relative-local").string());
  const auto want = testing::run(local);
  const auto run = run_cluster(c, 2, true, nullptr, std::chrono::seconds(20), false, elsewhere.string());
  INFO(run.logs());
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  check_same_state(*run.result.state, *want.state);
  // Every step's checkpoint was written by the workers where the supervisor looks.
  const auto latest = ckpt::load_latest((absolute / "checkpoints").string());
  REQUIRE(latest.checkpoint.has_value());
  CHECK(latest.checkpoint->step() >= 2);
  CHECK(!fs::exists(misread));
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));
}
