// The whole of a worker process (`supervisor worker --connect ADDR:PORT`): connect
// to the supervisor's registrar (retrying until the supervisor listens), prove that
// it belongs to the run (actors/cluster/cluster_auth.h), join with its slots, then host what
// the supervisor places on it (actors/cluster/worker_host.h) until the run is over or the
// supervisor is gone. Every path ends the process by itself: a refusal, a lost
// supervisor, SIGINT/SIGTERM, and a hard deadline on the final shutdown.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "actors/cluster/cluster_net.h"

namespace troupe::actors {

struct WorkerOptions {
  std::string host;        // the supervisor's address
  uint16_t port = 0;
  int32_t slots = 0;       // ranks it can host (0: the machine's cores)
  std::string secret_file; // "" : TROUPE_SECRET
  uint64_t config_hash = 0;  // of --config, to be compared with the run's (0: none)
  std::string gloo_host = "127.0.0.1";  // where its communicators listen (its own address)
  NetOptions net;
  std::chrono::milliseconds connect_timeout{60000};  // keep trying to reach the supervisor this long
  int32_t protocol = 0;  // cluster protocol version to claim (0: this build's; tests claim others)
};

// Exit status: 0 the run ended and released this worker; 1 an error, or the supervisor
// was lost; 3 refused (wrong secret, protocol version or config, or a supervisor that
// could not prove it knows the secret).
inline constexpr int kWorkerRefused = 3;
int run_worker(const WorkerOptions& options);

}  // namespace troupe::actors
