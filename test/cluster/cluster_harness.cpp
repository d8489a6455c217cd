#include "test/cluster/cluster_harness.h"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "test/actors/parity_check.h"
#include "test/cluster/worker_launcher.h"
#include "test/support/tiny_runtime_config.h"

namespace troupe::cluster_harness {

namespace fs = std::filesystem;

const fs::path kRoot = fs::temp_directory_path() / ("troupe-cluster-test-" + std::to_string(::getpid()));
namespace {
struct RemoveRoot {
  ~RemoveRoot() {
    std::error_code ec;
    fs::remove_all(kRoot, ec);
  }
} remove_root;
}  // namespace

std::string write_secret(const std::string& name, const std::string& text) {
  fs::create_directories(kRoot);
  const auto path = (kRoot / name).string();
  std::ofstream(path) << text << "\n";
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return path;
}

const std::string kSecretText = "5f0c1e2d3a4b5c6d7e8f90a1b2c3d4e5";

Config tiny(const std::string& name, int dp, int pp, int workers, int spares) {
  Config c = testing::tiny_runtime_config(4, dp, pp);
  const auto dir = kRoot / name;
  fs::remove_all(dir);
  fs::remove_all(kRoot / (name + "-local"));
  c.mutable_logging()->set_run_dir(dir.string());
  c.mutable_logging()->set_progress_bar(false);
  c.mutable_checkpoint()->set_save_on_exit(false);
  auto* k = c.mutable_cluster();
  k->set_workers(workers);
  k->set_spares(spares);
  k->set_heartbeat_interval_s(0.2);
  k->set_connection_timeout_s(2);
  k->set_worker_wait_s(60);
  return c;
}

Config local_of(Config c) {
  c.clear_cluster();
  c.mutable_logging()->set_run_dir(c.logging().run_dir() + "-local");
  c.clear_faults();
  return c;
}

std::string ClusterRun::logs() const {
  std::string out;
  for (const auto& w : workers) out += "---- " + w.log + "\n" + testing::tail_of(w.log);
  return out;
}

namespace {

// Whether `pid` is stopped (state T in /proc/PID/stat).
bool stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() && (stat[close + 2] == 'T' || stat[close + 2] == 't');
}

}  // namespace

ClusterRun run_cluster(const Config& c, int n, bool collect_state,
                       std::function<void(uint16_t port, ClusterRun&)> before, std::chrono::seconds reap_bound,
                       bool tls, const std::string& worker_cwd) {
  ClusterRun run;
  const auto secret = write_secret("secret", kSecretText);
  actors::RunOptions o;
  o.console = false;
  o.collect_state = collect_state;
  o.timeout = std::chrono::seconds(120);
  actors::ClusterOptions k;
  k.secret = kSecretText;
  k.tls.enabled = tls;
  k.on_listening = [&](uint16_t port) {
    if (before) before(port, run);
    for (int i = 0; i < n; ++i) {
      Worker w;
      w.log = fs::absolute(c.logging().run_dir() + "-worker" + std::to_string(i + 1) + ".log").string();
      fs::remove(w.log);
      auto args = testing::worker_args(port, secret);
      if (tls) args.push_back("--tls");
      w.pid = testing::launch_process(TROUPE_SUPERVISOR_BIN, args, w.log, worker_cwd);
      run.workers.push_back(w);
    }
  };
  o.cluster = k;
  try {
    run.result = actors::run_training(c, o);
  } catch (...) {
    for (auto& w : run.workers) w.status = testing::reap_process(w.pid, std::chrono::seconds(1), &w.killed);
    throw;
  }
  // A stopped process (SIGSTOP) never ends by itself: killed at once; every other one
  // gets the whole bound to leave (a loaded machine may need seconds).
  for (auto& w : run.workers)
    w.status = testing::reap_process(w.pid, stopped(w.pid) ? std::chrono::seconds(0) : reap_bound, &w.killed);
  return run;
}

bool exited_with(const Worker& w, int code) { return !w.killed && WIFEXITED(w.status) && WEXITSTATUS(w.status) == code; }

void check_same_steps(const actors::RunResult& got, const actors::RunResult& want) {
  REQUIRE(got.outcome.steps.size() == want.outcome.steps.size());
  for (size_t s = 0; s < want.outcome.steps.size(); ++s) {
    CAPTURE(s);
    CHECK(got.outcome.steps[s].loss == want.outcome.steps[s].loss);
    CHECK(got.outcome.steps[s].grad_norm == want.outcome.steps[s].grad_norm);
    CHECK(got.outcome.steps[s].lr == want.outcome.steps[s].lr);
  }
}

void check_matches(const ClusterRun& run, const actors::RunResult& want) {
  INFO(run.logs());
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  REQUIRE(run.result.state.has_value());
  check_same_steps(run.result, want);
  check_same_state(*run.result.state, *want.state);
}

void check_parity(const Config& c, int workers) {
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, workers);
  check_matches(run, want);
  CHECK(run.result.quarantine.empty());
  REQUIRE(run.result.workers.size() == size_t(workers));
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));
}

}  // namespace troupe::cluster_harness
