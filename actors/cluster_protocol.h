// The messages between the supervisor process and its worker processes (cluster
// mode, docs/cluster.md), besides the training messages themselves.
//
// Joining (worker -> the supervisor's registrar, each a request):
//   WorkerHello     -> Challenge    protocol version, config hash, slots; the worker's
//                                   nonce, which the supervisor answers with its own proof
//   WorkerProof     -> Welcome      HMAC-SHA256 of the challenge under the run's secret
//                                   (never the secret itself), and the worker's host actor
// Hosting (supervisor -> a worker's host actor):
//   PlaceActor      -> caf::actor   spawn a rank's stage / optim / writer or a loader there
//   AbortComms                      fail every communicator of a generation (a peer died)
//   PeerHandles                     the current coordinator (writers report to it)
//   LeaveRun                        the run is over: stop hosting and exit
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

namespace troupe::actors {

// Bumped whenever a message below or a training message changes shape.
inline constexpr int32_t kClusterProtocolVersion = 3;

struct WorkerHello {
  int32_t protocol = 0;
  uint64_t config_hash = 0;  // fnv1a64 of the canonical config text; 0: the worker has no config
  int32_t slots = 0;         // ranks it can host
  std::string host;          // its host name, for logs
  std::string gloo_host;     // the address its communicators listen on
  int64_t pid = 0;
  std::string nonce;         // fresh random bytes (hex): the supervisor must prove it knows the secret
};

struct Challenge {
  bool ok = false;
  std::string reason;  // why the worker is refused (ok = false)
  uint64_t session = 0;
  std::string nonce;             // fresh random bytes (hex), used once
  std::string supervisor_proof;  // HMAC(secret, supervisor message), hex
  // The supervisor's working directory when the config has relative paths ("" when it
  // has none): a worker resolves them there too (covered by supervisor_proof).
  std::string workdir;
};

struct WorkerProof {
  uint64_t session = 0;
  std::string proof;  // HMAC(secret, worker message), hex
  caf::actor host;    // the worker's host actor
};

struct Welcome {
  bool ok = false;
  std::string reason;
  int32_t worker_id = 0;
  std::string config;  // the run's Config, serialized (protobuf binary)
  std::string run_id;
  caf::actor store;    // the rendezvous store (actors/store_actor.h)
};

struct PlaceActor {
  std::string kind;  // "stage", "optim", "writer", "loader" (loader: rank.dp only)
  int32_t dp = 0, pp = 0, tp = 0;
  int64_t generation = 0;           // communicator generation of the training group's start
  int32_t incarnation = 0;          // the child's start: a rank's stage and optim of one start share a device
  std::string resume_dir;           // checkpoint to start from ("" : initial weights)
  std::vector<int32_t> fired;       // fault indices fired anywhere so far
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
typename Inspector::result_type inspect(Inspector& f, WorkerHello& x) {
  return f(caf::meta::type_name("troupe::actors::WorkerHello"), x.protocol, x.config_hash, x.slots, x.host,
           x.gloo_host, x.pid, x.nonce);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Challenge& x) {
  return f(caf::meta::type_name("troupe::actors::Challenge"), x.ok, x.reason, x.session, x.nonce,
           x.supervisor_proof, x.workdir);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerProof& x) {
  return f(caf::meta::type_name("troupe::actors::WorkerProof"), x.session, x.proof, x.host);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Welcome& x) {
  return f(caf::meta::type_name("troupe::actors::Welcome"), x.ok, x.reason, x.worker_id, x.config, x.run_id,
           x.store);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PlaceActor& x) {
  return f(caf::meta::type_name("troupe::actors::PlaceActor"), x.kind, x.dp, x.pp, x.tp, x.generation,
           x.incarnation, x.resume_dir, x.fired);
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
