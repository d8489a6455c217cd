// The registrar: the one actor a cluster run publishes, to connections the gate
// admitted (actors/cluster/cluster_gate.h: they proved the run's secret). A worker joins the
// run with the gate's ticket (actors/cluster/cluster_protocol.h):
//
//   JoinRequest -> Welcome     refused (logged with the reason, never given ranks) when
//                              the ticket is unknown or used, its actors live in
//                              another process than the one that sent it, the process
//                              was quarantined, or the run is over; else the worker
//                              joins the Cluster (active or spare), its link is watched
//                              (actors/cluster/link_watch.h) and it gets the run's config
//
// It monitors every joined worker's host actor: a connection that drops (SIGKILL, a
// crash, a link the watch found silent) quarantines that worker.
// Workers report faults that fired on them (FaultFired) so that the run's fault plan
// fires each fault once across processes.
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/cluster/cluster.h"
#include "actors/cluster/cluster_gate.h"
#include "actors/cluster/link_watch.h"
#include "actors/run_book.h"
#include "engine/faults.h"

namespace troupe::actors {

struct RegistrarArgs {
  std::shared_ptr<Cluster> cluster;
  std::shared_ptr<JoinTickets> tickets;  // the gate's admissions
  std::shared_ptr<LinkWatch> links;
  std::string config;  // serialized Config handed to every worker
  std::string run_id;
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
