// What the cluster suites share (test_cluster on the CPU, test_cluster_cuda_emulated on
// the CUDA emulation): the tiny config, a supervisor run in this process with worker
// processes of TROUPE_SUPERVISOR_BIN on loopback, and the bitwise comparisons.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "engine/state_snapshot.h"
#include "messages/config.pb.h"
#include "test/support/fault.h"
#include "test/support/same_state.h"

namespace troupe::cluster_harness {

// One directory per test process (another build's suite may run at the same time),
// removed when the process ends.
extern const std::filesystem::path kRoot;
extern const std::string kSecretText;

// Writes `text` to kRoot/name, readable by its owner only; returns the path.
std::string write_secret(const std::string& name, const std::string& text);

// The tiny model of the runtime suites (test/support/tiny_runtime_config.h) with 4
// layers, run directory kRoot/name, `workers` workers and `spares` spares.
Config tiny(const std::string& name, int dp, int pp, int workers, int spares = 0);

// The same config in one process.
Config local_of(Config c);

struct Worker {
  pid_t pid = 0;
  std::string log;
  int status = 0;
  bool killed = false;  // still running at the bound
};

struct ClusterRun {
  actors::RunResult result;
  std::vector<Worker> workers;
  std::string logs() const;  // every worker's log tail (for failure messages)
};

// Runs `c` as the supervisor with `n` workers started once it listens. `before`
// may start and reap other processes first (refused workers).
ClusterRun run_cluster(const Config& c, int n, bool collect_state = true,
                       std::function<void(uint16_t port, ClusterRun&)> before = nullptr,
                       std::chrono::seconds reap_bound = std::chrono::seconds(20), bool tls = false,
                       const std::string& worker_cwd = "");

bool exited_with(const Worker& w, int code);

// Final weights and both Adam moments, memcmp-equal (test/support/same_state.h).
using testing::check_same_state;
// Every step's loss, grad norm and learning rate equal.
void check_same_steps(const actors::RunResult& got, const actors::RunResult& want);
// `run` completed with the steps, weights and Adam moments of `want`, bitwise (its
// workers' log tails on failure).
void check_matches(const ClusterRun& run, const actors::RunResult& want);
// `c` on `workers` workers completes bitwise equal to the in-process run of local_of(c).
void check_parity(const Config& c, int workers);

using testing::fault;  // test/support/fault.h

}  // namespace troupe::cluster_harness
