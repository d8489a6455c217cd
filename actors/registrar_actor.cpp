#include "actors/registrar_actor.h"

#include <unistd.h>

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster_auth.h"
#include "actors/cluster_protocol.h"
#include "actors/supervision.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

// A worker between its hello and its proof.
struct Session {
  WorkerHello hello;
  std::string nonce;
  caf::node_id node;
  Clock::time_point created;
};

struct RegistrarState {
  RegistrarArgs args;
  std::map<uint64_t, Session> sessions;
  uint64_t next_session = 0;
  std::map<caf::actor_addr, std::string> joined;  // host actor -> "worker N (host, pid P)"
  std::string hostname;
  bool run_over = false;
};

using Self = caf::stateful_actor<RegistrarState>;

constexpr auto kSessionLifetime = std::chrono::seconds(60);

std::string who(const WorkerHello& h) { return fmt::format("{} pid {}", h.host.empty() ? "?" : h.host, h.pid); }

void refuse(Self* self, const std::string& worker, const std::string& reason) {
  spdlog::warn("cluster: refused {}: {}", worker, reason);
  if (self->state.args.on_refused) self->state.args.on_refused(worker, reason);
}

Challenge on_hello(Self* self, const WorkerHello& h) {
  auto& st = self->state;
  const auto now = Clock::now();
  for (auto it = st.sessions.begin(); it != st.sessions.end();)
    it = now - it->second.created > kSessionLifetime ? st.sessions.erase(it) : std::next(it);
  Challenge c;
  const auto node = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
  if (h.protocol != kClusterProtocolVersion)
    c.reason = fmt::format("it speaks cluster protocol version {}, this supervisor speaks {}", h.protocol,
                           kClusterProtocolVersion);
  else if (h.config_hash != 0 && h.config_hash != st.args.config_hash)
    c.reason = fmt::format("its config hash {:016x} differs from the run's {:016x}: it was started with another "
                           "config (or other --set values)",
                           h.config_hash, st.args.config_hash);
  else if (h.slots < 1)
    c.reason = fmt::format("it offers {} slot(s); a worker needs at least 1", h.slots);
  else if (h.nonce.size() < 32)
    c.reason = "its nonce is too short (at least 16 random bytes as hex)";
  else if (auto q = st.args.cluster->refused(node))
    c.reason = *q;
  if (!c.reason.empty()) {
    refuse(self, who(h), c.reason);
    return c;
  }
  c.ok = true;
  c.session = ++st.next_session;
  c.nonce = random_hex(32);
  c.workdir = st.args.workdir;
  c.supervisor_proof =
      hmac_sha256_hex(st.args.secret, supervisor_proof_text(c.session, c.nonce, h.nonce, c.workdir));
  st.sessions[c.session] = Session{h, c.nonce, node, now};
  return c;
}

Welcome on_proof(Self* self, WorkerProof& p) {
  auto& st = self->state;
  Welcome w;
  auto it = st.sessions.find(p.session);
  if (it == st.sessions.end()) {
    w.reason = "unknown or already used session (a proof answers one fresh challenge, once)";
    refuse(self, "a worker", w.reason);
    return w;
  }
  const Session s = std::move(it->second);
  st.sessions.erase(it);
  const auto expected = hmac_sha256_hex(st.args.secret, worker_proof_text(p.session, s.nonce, s.hello.nonce));
  if (!same_secret_text(expected, p.proof)) {
    w.reason = "wrong secret: its answer to the challenge does not match this run's secret";
    refuse(self, who(s.hello), w.reason);
    return w;
  }
  if (!p.host || p.host.node() != s.node) {
    w.reason = "its host actor does not live in the process that said hello";
    refuse(self, who(s.hello), w.reason);
    return w;
  }
  if (st.run_over) {
    w.reason = "the run is over";
    refuse(self, who(s.hello), w.reason);
    return w;
  }
  WorkerRecord r;
  r.host = s.hello.host;
  r.gloo_host = s.hello.gloo_host;
  r.pid = s.hello.pid;
  r.slots = s.hello.slots;
  r.agent = p.host;
  r.node = s.node;
  r = st.args.cluster->join(std::move(r));
  self->monitor(p.host);
  st.joined[p.host.address()] = Cluster::describe(r);
  w.ok = true;
  w.worker_id = r.id;
  w.config = st.args.config;
  w.run_id = st.args.run_id;
  w.store = st.args.store;
  return w;
}

caf::behavior registrar_impl(Self* self, RegistrarArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  st.hostname = name;
  exit_on_exception(self, "registrar");
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    auto it = s.joined.find(dm.source);
    if (it == s.joined.end()) return;
    const auto name = it->second;
    s.joined.erase(it);
    if (s.run_over) return;  // workers leave when the run is over: not a loss
    // remote_link_unreachable: the BASP connection dropped (the process died, or sent
    // no heartbeat for cluster.connection_timeout_s); anything else: its host actor
    // ended while the process may still live (it is quarantined all the same).
    const auto why = dm.reason == caf::exit_reason::remote_link_unreachable
                         ? std::string("the connection to its process dropped: the process died or stopped "
                                       "answering heartbeats")
                         : fmt::format("its host actor ended ({})", describe_exit(self->system(), dm.reason));
    s.args.cluster->lost(dm.source.node(), why);
  });
  return {
      [self](const WorkerHello& h) { return on_hello(self, h); },
      [self](WorkerProof& p) { return on_proof(self, p); },
      [self](const FaultFired& f) {
        auto& s = self->state;
        s.args.faults->mark_fired({f.index});
        if (f.host == s.hostname && s.args.book)
          s.args.book->fault_fired_at(Clock::time_point(std::chrono::nanoseconds(f.steady_ns)));
        spdlog::warn("cluster: fault {} fired on worker {}", f.index, f.worker_id);
        return true;
      },
      [self](run_over_atom) { self->state.run_over = true; },
  };
}

}  // namespace

caf::actor spawn_registrar(caf::actor_system& sys, RegistrarArgs args) {
  return sys.spawn(registrar_impl, std::move(args));
}

}  // namespace troupe::actors
