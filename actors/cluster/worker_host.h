// The host actor of a worker process (`supervisor worker`): it hosts the actors the
// supervisor places on this worker (PlaceActor -> the new actor's handle):
//
//   stage  / optim / writer of rank (d, p, t)   co-located: the optimizer shard finds
//                                                its writer here and shares the stage's
//                                                buffers by pointer
//   loader of replica d                          with the replica's first stage
//
// The stages' communicators are Gloo groups connected through the supervisor's store
// under the generation the supervisor names (RUN_ID/genG); each stage connects its
// own groups on its own thread when it starts. AbortComms fails every communicator of
// a generation (a peer died) and releases injected hangs; PeerHandles names the
// current coordinator (writers report to it); LeaveRun ends the worker. When the
// supervisor's connection drops, the host aborts everything and ends too.
//
// Until Configure arrives (from the worker's main thread, right after it joined) the
// host keeps every other message in its mailbox.
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "comm/gloo_communicator.h"
#include "comm/gloo_store.h"
#include "engine/faults.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct WorkerHostArgs {
  Config config;
  int32_t worker_id = 0;
  std::string run_id;
  caf::actor registrar;                 // the supervisor (monitored)
  std::shared_ptr<comm::Store> store;   // the rendezvous store (actors/cluster/store_actor.h)
  comm::GlooOptions gloo;               // this worker's listen address, collective timeout
  std::shared_ptr<engine::FaultPlan> faults;
};

// In-process message: the worker joined; host with these.
struct ConfigureHost {
  std::shared_ptr<const WorkerHostArgs> args;
};

caf::actor spawn_worker_host(caf::actor_system& sys);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ConfigureHost)
