#include "actors/cluster/registrar_actor.h"

#include <unistd.h>

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster_protocol.h"
#include "actors/cluster/join_protocol.h"
#include "actors/supervision.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct RegistrarState {
  RegistrarArgs args;
  std::map<caf::actor_addr, std::pair<std::string, caf::node_id>> joined;  // host actor -> name, node
  std::string hostname;
  bool run_over = false;
};

using Self = caf::stateful_actor<RegistrarState>;

std::string who(const Admission& a) {
  return fmt::format("{} pid {} from {}", a.hello.host.empty() ? "?" : printable(a.hello.host), a.hello.pid, a.peer);
}

Welcome refuse(Self* self, const std::string& worker, const std::string& reason) {
  spdlog::warn("cluster: refused {}: {}", worker, reason);
  if (self->state.args.on_refused) self->state.args.on_refused(worker, reason);
  Welcome w;
  w.reason = reason;
  return w;
}

Welcome on_join(Self* self, JoinRequest& j) {
  auto& st = self->state;
  const auto node = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
  auto admitted = st.args.tickets->redeem(j.ticket);
  if (!admitted) return refuse(self, "a worker", "unknown or already used ticket (a ticket admits one connection, once)");
  // From here the admission's link fd is ours: watched, or closed on refusal.
  const auto refuse_closing = [&](const std::string& reason) {
    ::close(admitted->link_fd);
    return refuse(self, who(*admitted), reason);
  };
  if (!j.host || j.host.node() != node || !j.responder || j.responder.node() != node)
    return refuse_closing("its actors do not live in the process that sent the request");
  if (auto q = st.args.cluster->refused(node)) return refuse_closing(*q);
  if (st.run_over) return refuse_closing("the run is over");
  const auto& h = admitted->hello;
  WorkerRecord r;
  r.host = h.host;
  r.gloo_host = h.gloo_host;
  r.pid = h.pid;
  r.slots = h.slots;
  r.agent = j.host;
  r.node = node;
  r = st.args.cluster->join(std::move(r));
  self->monitor(j.host);
  const auto name = Cluster::describe(r);
  st.joined[j.host.address()] = {name, node};
  st.args.links->watch(r.id, node, j.responder, admitted->link_fd, name);
  Welcome w;
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
    const auto node = it->second.second;
    s.joined.erase(it);
    s.args.links->forget(node);
    if (s.run_over) return;  // workers leave when the run is over: not a loss
    // remote_link_unreachable: the BASP connection dropped (the process died, or the
    // link watch found it silent and shut it down); anything else: its host actor
    // ended while the process may still live (it is quarantined all the same).
    const auto why = dm.reason == caf::exit_reason::remote_link_unreachable
                         ? std::string("the connection to its process dropped: the process died or stopped "
                                       "answering heartbeats")
                         : fmt::format("its host actor ended ({})", describe_exit(self->system(), dm.reason));
    s.args.cluster->lost(dm.source.node(), why);
  });
  return {
      [self](JoinRequest& j) { return on_join(self, j); },
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
