// Liveness of the worker processes, judged on each worker's own link (cluster mode,
// docs/cluster.md "Failure handling"). Every `interval` the watch sends each joined
// worker's responder (a detached actor in the worker, spawn_link_responder) a ping
// over that worker's connection; a worker that answered nothing for `timeout` is
// lost: the Cluster quarantines it (with that reason) and the watch shuts its socket
// down, so CAF drops the link and every monitor of its actors fires
// (remote_link_unreachable), exactly as when the process dies.
//
// The supervisor's own lateness is told apart: before judging, the watch measures how
// late its own tick ran and how late CAF's I/O loop ran a probe posted to it. When
// either is later than half the timeout (the process was descheduled, stopped, or its
// I/O loop stalled), every worker's silence restarts from now and the episode is
// logged once: a late supervisor never takes live workers for dead ones.
//
// The supervisor runs CAF's middleman with heartbeats but no connection timeout:
// CAF 0.17 drops a connection when its own tick finds it silent, also when the tick
// itself is what ran late.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/all.hpp>

#include "actors/cluster/cluster.h"

namespace troupe::actors {

using link_ping_atom = caf::atom_constant<caf::atom("linkping")>;
using link_pong_atom = caf::atom_constant<caf::atom("linkpong")>;

// A worker's responder: answers (link_ping_atom, id, seq) with (link_pong_atom, id, seq)
// on a thread of its own, so busy compute threads cannot delay the answer.
caf::actor spawn_link_responder(caf::actor_system& sys);

class LinkWatch {
 public:
  LinkWatch(caf::actor_system& sys, std::shared_ptr<Cluster> cluster, std::chrono::milliseconds interval,
            std::chrono::milliseconds timeout);
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // Watches a joined worker; takes ownership of `link_fd` (a duplicate of its socket).
  void watch(int32_t worker_id, const caf::node_id& node, caf::actor responder, int link_fd, std::string name);
  // The worker's link is gone (or the run is over): stop watching, close its fd.
  void forget(const caf::node_id& node);
  void stop();

  // Episodes in which the supervisor's own tick or I/O loop ran late (each logged once).
  int64_t late_episodes() const { return late_episodes_.load(); }

 private:
  struct Watched {
    int32_t id = 0;
    caf::node_id node;
    caf::actor responder;
    int link_fd = -1;
    std::string name;
    std::chrono::steady_clock::time_point last_heard;
  };
  void loop();
  void tick(caf::scoped_actor& self, std::chrono::steady_clock::time_point scheduled);

  caf::actor_system& sys_;
  std::shared_ptr<Cluster> cluster_;
  const std::chrono::milliseconds interval_, timeout_;
  std::mutex mu_;
  std::map<int32_t, Watched> watched_;  // by worker id
  // CAF's I/O loop probe: when the outstanding one was posted, and whether it ran.
  struct Probe {
    std::atomic<int64_t> posted_ns{0};
    std::atomic<int64_t> ran_ns{0};
  };
  std::shared_ptr<Probe> probe_ = std::make_shared<Probe>();
  bool late_now_ = false;
  std::atomic<int64_t> late_episodes_{0};
  uint64_t seq_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace troupe::actors
