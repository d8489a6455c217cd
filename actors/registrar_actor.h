// The registrar: the one actor a cluster run publishes (CAF io middleman, bound to
// loopback unless told otherwise). Worker processes connect to it and join the run
// (actors/cluster_protocol.h):
//
//   WorkerHello -> Challenge   refused (logged with the reason, never given ranks) when
//                              its protocol version or config hash differs from the
//                              run's, or its process was quarantined
//   WorkerProof -> Welcome     refused when the HMAC does not match (wrong secret) or
//                              the session is unknown or used; else the worker joins
//                              the Cluster (active or spare) and gets the run's config
//
// It monitors every joined worker's host actor: a connection that drops (SIGKILL, a
// crash, no heartbeat within cluster.connection_timeout_s) quarantines that worker.
// Workers report faults that fired on them (FaultFired) so that the run's fault plan
// fires each fault once across processes.
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/cluster.h"
#include "actors/run_book.h"
#include "engine/faults.h"

namespace troupe::actors {

struct RegistrarArgs {
  std::shared_ptr<Cluster> cluster;
  std::string secret;
  uint64_t config_hash = 0;
  std::string config;  // serialized Config handed to every worker
  std::string run_id;
  std::string workdir;  // Challenge::workdir
  caf::actor store;
  std::shared_ptr<engine::FaultPlan> faults;
  std::shared_ptr<RunBook> book;
  // Refusals (worker, reason), for the run's report and tests.
  std::function<void(const std::string& who, const std::string& reason)> on_refused;
};

caf::actor spawn_registrar(caf::actor_system& sys, RegistrarArgs args);

// Sent to the registrar when the run is over: workers leaving from now on are not losses.
using run_over_atom = caf::atom_constant<caf::atom("runover")>;

}  // namespace troupe::actors
