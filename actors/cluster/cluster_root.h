// The supervisor's side of a cluster run (`supervisor run --listen`), besides the
// supervision tree: the rendezvous store, the gate on the listen address
// (actors/cluster/cluster_gate.h) that admits workers to the registrar, the link watch
// (actors/cluster/link_watch.h), waiting for the workers, and the end of the run (workers are
// told to leave and their departures awaited). Used by run_training (actors/runtime.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/cluster/cluster.h"
#include "actors/cluster/cluster_gate.h"
#include "actors/cluster/cluster_net.h"
#include "actors/cluster/link_watch.h"
#include "actors/cluster/refusal_log.h"
#include "actors/run_book.h"
#include "engine/faults.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct ClusterOptions {
  std::string listen_host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 0;                      // 0: any free port (the bound one is reported)
  std::string secret;                     // the run's secret (actors/cluster/cluster_auth.h)
  TlsOptions tls;
  // Called once the gate listens, with the bound port (tests start workers here).
  std::function<void(uint16_t port)> on_listening;
};

// The supervisor's network options: heartbeats of the config's cluster section, no
// CAF connection timeout (the link watch judges the workers), and TLS.
NetOptions net_options(const Config& c, const TlsOptions& tls);

class ClusterRoot {
 public:
  // Spawns the store and the registrar, starts the link watch and opens the gate;
  // writes RUN_DIR/cluster.address
  // ("host:port", temporary name + fsync + rename) for scripts that start workers.
  // `placed`: the logical layout on the placement the run starts on (engine::RunState).
  ClusterRoot(caf::actor_system& sys, const Config& c, const engine::Topology& placed, const ClusterOptions& options,
              const std::string& run_dir, std::shared_ptr<engine::FaultPlan> faults, std::shared_ptr<RunBook> book);

  uint16_t port() const { return port_; }
  std::shared_ptr<Cluster> cluster() const { return cluster_; }
  std::shared_ptr<ClusterComms> comms() const { return comms_; }

  // Blocks until every active worker has joined (and the spares, within the same
  // wait); throws std::runtime_error saying what is missing after cluster.worker_wait_s.
  void wait_for_workers(const std::function<bool()>& interrupted);

  // The run is over: every live worker is told to leave; returns once they are gone
  // (or after `timeout`). Stops the registrar and the store.
  void finish(const std::string& why, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  std::vector<Refusal> refusals() const;  // the first RefusalLog::kKept
  int64_t refusals_total() const;
  ~ClusterRoot();

 private:
  caf::actor_system& sys_;
  Config config_;
  std::shared_ptr<Cluster> cluster_;
  std::shared_ptr<ClusterComms> comms_;
  caf::actor store_, registrar_;
  std::shared_ptr<JoinTickets> tickets_ = std::make_shared<JoinTickets>();
  std::shared_ptr<LinkWatch> links_;
  std::unique_ptr<Gate> gate_;
  uint16_t port_ = 0;
  bool finished_ = false;
  // Shared with the registrar, which may outlive this object by a message or two.
  std::shared_ptr<RefusalLog> refusals_ = std::make_shared<RefusalLog>();
};

}  // namespace troupe::actors
