// The messages between the supervisor process and its worker processes (cluster
// mode, docs/cluster.md), besides the training messages themselves.
//
// Joining: the join handshake (actors/cluster/join_protocol.h) runs before CAF sees the
// connection; then, over CAF (worker -> the supervisor's registrar, a request):
//   JoinRequest     -> Welcome      the gate's one-use ticket, the worker's host actor
//                                   and its liveness responder (actors/cluster/link_watch.h)
// Hosting (supervisor -> a worker's host actor):
//   PlaceActor      -> caf::actor   spawn a rank's stage / optim / writer or a loader there
//   AbortComms                      fail every communicator of a generation (a peer died)
//   PeerHandles                     the current coordinator (writers report to it)
//   LeaveRun                        the run is over: stop hosting and exit
// The state mirror (engine/state_mirror.h; each through a worker's host to its keeper):
//   MirrorBuddy                     supervisor -> host: where its keeper sends its copies
//   MirrorCopy      -> mirror_held  keeper -> the buddy's host: a shard's bytes to hold
//   MirrorFetch     -> std::string  a host placing a restarted rank -> a holder's host
// Reports (worker -> registrar):
//   FaultFired      -> bool         an injected fault fired on the worker (acknowledged
//                                   before a KILL_PROCESS fault kills the process)
// Rendezvous store (comm::Store over messages; a worker -> the supervisor's store actor):
//   StoreSet / StoreWait -> StoreReply;  StoreAbort fails waits under a prefix
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/cluster/wire_rank.h"

namespace troupe::actors {

// Bumped whenever a message below or a training message changes shape.
inline constexpr int32_t kClusterProtocolVersion = 6;

struct JoinRequest {
  std::string ticket;    // from the gate's verdict: what this connection proved
  caf::actor host;       // the worker's host actor
  caf::actor responder;  // answers the supervisor's liveness pings
};

struct Welcome {
  bool ok = false;
  std::string reason;
  int32_t worker_id = 0;
  std::string config;  // the run's Config, serialized (protobuf binary)
  std::string run_id;
  caf::actor store;    // the rendezvous store (actors/cluster/store_actor.h)
};

struct PlaceActor {
  std::string kind;  // "stage", "optim", "writer", "loader" (loader: rank.dp only)
  Rank rank;
  int64_t generation = 0;           // communicator generation of the training group's start
  int32_t incarnation = 0;          // the child's start: a rank's stage and optim of one start share a device
  std::string resume_dir;           // checkpoint to start from ("" : initial weights)
  std::vector<int32_t> fired;       // fault indices fired anywhere so far
  std::vector<int64_t> skip_samples;  // a loader's: the run state's skip list (engine/run_state.h)
  // The training group's placement (engine::RunState::physical_replicas): with the
  // config's logical layout, which stage hosts which logical ranks and the groups it joins.
  int32_t physical_replicas = 0;
  // A start from the state mirror (engine/state_mirror.h) instead of `resume_dir`: its
  // step (-1: none), manifest (serialized), and for each of its shards the rank that
  // wrote it and the host of a live worker that holds its bytes.
  int64_t mirror_step = -1;
  std::string mirror_manifest;
  std::vector<Rank> mirror_ranks;
  std::vector<caf::actor> mirror_hosts;
};

struct MirrorBuddy {
  int32_t worker_id = 0;  // 0: none (one active worker)
  caf::actor host;
};

struct MirrorCopy {
  int64_t step = 0;
  int64_t timeline = 0;
  std::string file;
  std::string bytes;
};

struct MirrorFetch {
  int64_t step = 0;
  std::string file;
};

struct AbortComms {
  int64_t generation = 0;
  std::string why;
};

struct PeerHandles {
  caf::actor coordinator;
};

struct LeaveRun {
  std::string why;
};

struct FaultFired {
  int32_t worker_id = 0;
  int32_t index = 0;
  int64_t steady_ns = 0;  // when, on the worker's steady clock (comparable on one machine)
  std::string host;
};

struct StoreSet {
  std::string key;
  std::vector<char> value;
};

struct StoreWait {
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  bool want_value = false;  // reply with the value of keys[0]
};

struct StoreAbort {
  std::string prefix;
  std::string why;
};

struct StoreReply {
  bool ok = false;
  std::string error;
  std::vector<std::string> missing;  // keys that never appeared (timeout)
  std::vector<char> value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinRequest& x) {
  return f(caf::meta::type_name("troupe::actors::JoinRequest"), x.ticket, x.host, x.responder);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Welcome& x) {
  return f(caf::meta::type_name("troupe::actors::Welcome"), x.ok, x.reason, x.worker_id, x.config, x.run_id,
           x.store);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PlaceActor& x) {
  return f(caf::meta::type_name("troupe::actors::PlaceActor"), x.kind, x.rank, x.generation,
           x.incarnation, x.resume_dir, x.fired, x.skip_samples, x.physical_replicas, x.mirror_step,
           x.mirror_manifest, x.mirror_ranks, x.mirror_hosts);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorBuddy& x) {
  return f(caf::meta::type_name("troupe::actors::MirrorBuddy"), x.worker_id, x.host);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorCopy& x) {
  return f(caf::meta::type_name("troupe::actors::MirrorCopy"), x.step, x.timeline, x.file, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorFetch& x) {
  return f(caf::meta::type_name("troupe::actors::MirrorFetch"), x.step, x.file);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AbortComms& x) {
  return f(caf::meta::type_name("troupe::actors::AbortComms"), x.generation, x.why);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PeerHandles& x) {
  return f(caf::meta::type_name("troupe::actors::PeerHandles"), x.coordinator);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LeaveRun& x) {
  return f(caf::meta::type_name("troupe::actors::LeaveRun"), x.why);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FaultFired& x) {
  return f(caf::meta::type_name("troupe::actors::FaultFired"), x.worker_id, x.index, x.steady_ns, x.host);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StoreSet& x) {
  return f(caf::meta::type_name("troupe::actors::StoreSet"), x.key, x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StoreWait& x) {
  return f(caf::meta::type_name("troupe::actors::StoreWait"), x.keys, x.timeout_ms, x.want_value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StoreAbort& x) {
  return f(caf::meta::type_name("troupe::actors::StoreAbort"), x.prefix, x.why);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StoreReply& x) {
  return f(caf::meta::type_name("troupe::actors::StoreReply"), x.ok, x.error, x.missing, x.value);
}

}  // namespace troupe::actors
