// Strangers on the port (docs/cluster.md "Threat model"): on a cluster run (two workers
// and a spare, on loopback), connections without the secret send what a port scanner,
// a health check, a stray curl or an attacker would, and a worker with a wrong secret, a
// replayed handshake and (on TLS) a plaintext client try to join: once before the
// workers start, where each refusal is waited for and its reason checked, and again
// from the first step on, while it trains. The run must not notice: it completes
// bitwise equal to the in-process run, with no restart and no quarantine, and the
// supervisor's peak RSS stays within kRssAllowanceBytes of the same run without
// strangers.
//
// The strangers are a process of their own (test/cluster/stranger_main.cpp), so the
// supervisor's memory (this process) is measured without them.
//
// Tolerances, fixed before the first run: weights and Adam moments bitwise (memcmp);
// peak RSS (VmHWM, reset through /proc/self/clear_refs before each run) at most 8 MiB
// above the run without strangers (32 pending handshakes with their TLS sessions are
// about 2 MB; the run keeps at most RefusalLog::kKept refusals however many connections
// the strangers make, which the replaying stranger's retries make by the ten thousand
// when they overlap the flood). Every loop here is bounded.
#include <doctest/doctest.h>

#include <malloc.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "actors/cluster/worker_process.h"
#include "test/actors/parity_check.h"
#include "test/cluster/cluster_harness.h"
#include "test/cluster/worker_launcher.h"

using namespace troupe;
using namespace troupe::cluster_harness;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kRssAllowanceBytes = int64_t(8) << 20;

// glibc gives threads that contend for malloc arenas of their own, as many as timing
// makes; each holds on to what it touched. Identical runs then differ in peak RSS by up
// to 15 MB (measured), more than what is measured here. One arena, set before any
// thread starts, makes the peak a property of the run, not of the scheduling.
[[maybe_unused]] const int kOneArena = mallopt(M_ARENA_MAX, 1);

// Peak resident set of this process (the supervisor) since the last reset.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

Config stranger_config(const std::string& name) {
  Config c = tiny(name, 2, 1, 2, 1);
  // Long enough for the strangers to arrive while it trains (the gate's limits and
  // deadline themselves are pinned in gate_test.cpp); a handshake deadline below the
  // probes' hold, so held connections meet it while the run lasts.
  c.mutable_training()->set_train_samples(8 * 300);
  c.mutable_cluster()->set_handshake_timeout_s(2);
  return c;
}

// key=value lines of the stranger program's results.
std::map<std::string, std::string> read_results(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (const auto eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  return out;
}

void check_strangers(bool tls) {
  const std::string mode = tls ? "tls" : "plain";
  const auto want = testing::run(local_of(stranger_config("strangers-" + mode)));

  // The same run without strangers: the memory it needs.
  reset_peak_rss();
  const auto quiet = run_cluster(stranger_config("quiet-" + mode), 3, true, nullptr, std::chrono::seconds(20), tls);
  const int64_t quiet_peak = peak_rss_bytes();
  REQUIRE_MESSAGE(quiet.result.outcome.status == "completed", quiet.result.outcome.error);

  const Config c = stranger_config("strangers-" + mode);
  ::setenv("TROUPE_SECRET", kSecretText.c_str(), 1);  // the replay's recorded answer
  std::map<std::string, std::string> before;  // the first stranger's results
  Worker wrong, during;
  reset_peak_rss();
  const auto run = run_cluster(
      c, 3, true,
      [&](uint16_t port, ClusterRun&) {
        // Before the workers start, while the gate is certainly open: the strangers whose
        // refusals are checked below, each waited for (nothing here races the run's end).
        const auto out = (kRoot / ("stranger-before-" + mode)).string();
        const auto log = out + ".log";
        const pid_t first = testing::launch_process(
            TROUPE_STRANGER_BIN, {std::to_string(port), mode, "before", out}, log);
        bool killed = false;
        const int status = testing::reap_process(first, std::chrono::seconds(90), &killed);
        CHECK_MESSAGE((!killed && WIFEXITED(status) && WEXITSTATUS(status) == 0), testing::tail_of(log));
        before = read_results(out);
        const auto secret = write_secret("wrong-" + mode, "00000000000000000000000000000000");
        auto args = testing::worker_args(port, secret);
        if (tls) args.push_back("--tls");
        wrong.log = (kRoot / ("wrong-" + mode + ".log")).string();
        wrong.pid = testing::launch_process(TROUPE_SUPERVISOR_BIN, args, wrong.log);
        wrong.status = testing::reap_process(wrong.pid, std::chrono::seconds(30), &wrong.killed);
        // Then the same strangers at once from the first step on, while it trains. Only
        // the run's outcome is checked for them: how much of the run they overlap depends
        // on the machine, and the gate closes what is still open when the run ends.
        during.log = (kRoot / ("stranger-during-" + mode + ".log")).string();
        during.pid = testing::launch_process(TROUPE_STRANGER_BIN,
                                             {std::to_string(port), mode, "during", during.log + ".out",
                                              c.logging().run_dir()},
                                             during.log);
      },
      std::chrono::seconds(20), tls);
  during.status = testing::reap_process(during.pid, std::chrono::seconds(90), &during.killed);
  const int64_t peak = peak_rss_bytes();

  INFO(run.logs());
  INFO("the first stranger's results: " << testing::tail_of((kRoot / ("stranger-before-" + mode)).string()));
  INFO("the second stranger's log: " << testing::tail_of(during.log));
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  check_same_state(*run.result.state, *want.state);
  check_same_steps(run.result, want);
  CHECK(run.result.restarts == 0);
  CHECK(run.result.quarantine.empty());
  CHECK(run.result.workers.size() == 3);
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));

  // Every stranger was shown the door, each with its reason on one line.
  CHECK(before["not_closed"] == "");
  CHECK(exited_with(during, 0));
  std::string reasons;
  for (const auto& r : run.result.refusals) {
    CHECK(r.worker.rfind("127.0.0.1:", 0) == 0);
    reasons += r.worker + ": " + r.reason + "\n";
  }
  INFO(reasons);
  // Bounded, however many connections the strangers made (actors/cluster/refusal_log.h).
  MESSAGE(run.result.refusals_total << " refusals in all, " << run.result.refusals.size() << " kept (" << mode << ")");
  CHECK(run.result.refusals.size() <= actors::RefusalLog::kKept);
  CHECK(run.result.refusals_total >= int64_t(run.result.refusals.size()));
  if (tls) {
    CHECK(reasons.find("TLS handshake failed") != std::string::npos);
  } else {
    CHECK(reasons.find("does not speak troupe's join protocol") != std::string::npos);
    CHECK(reasons.find("declared a join message of 65535 bytes") != std::string::npos);
  }
  CHECK(before["flood_limited"] == "1");
  CHECK(reasons.find("already in the join handshake (the limit)") != std::string::npos);
  CHECK(reasons.find("wrong secret") != std::string::npos);
  CHECK(before["replay_first_admitted"] == "1");
  CHECK(before["replay_refused"] == "1");
  CHECK(before["replay_reason"].find("wrong secret") != std::string::npos);
  {
    INFO(testing::tail_of(wrong.log));
    CHECK(exited_with(wrong, actors::kWorkerRefused));
  }

  // The supervisor's memory: what the run needs, not what strangers declare.
  MESSAGE("peak RSS with strangers " << peak << " B, without " << quiet_peak << " B (" << mode << ")");
  CHECK(peak - quiet_peak <= kRssAllowanceBytes);
}

}  // namespace

TEST_CASE("strangers on the port of a plain run: the run completes bitwise, nothing restarts") {
  check_strangers(false);
}

TEST_CASE("strangers on the port of a TLS run: the run completes bitwise, nothing restarts") { check_strangers(true); }
