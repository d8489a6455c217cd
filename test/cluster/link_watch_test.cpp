// The link watch (actors/cluster/link_watch.h) in one process: a "worker" whose responder never
// answers, a socketpair standing for its link (the watch shuts its end down to drop
// it), and CAF's I/O loop stalled on purpose. Bounded waits only; nothing here asserts
// how fast the machine is.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <caf/io/all.hpp>

#include "actors/cluster/cluster.h"
#include "actors/cluster/link_watch.h"

using namespace troupe;
using namespace troupe::actors;
using Clock = std::chrono::steady_clock;

namespace {

// Whether the watch shut the link down: the other end of the pair reads EOF.
bool link_dropped(int other_end, std::chrono::milliseconds within) {
  pollfd p{other_end, POLLIN, 0};
  if (::poll(&p, 1, int(within.count())) <= 0) return false;
  char c;
  return ::recv(other_end, &c, 1, MSG_DONTWAIT) == 0;
}

Config one_worker() {
  Config c;
  c.mutable_cluster()->set_workers(1);
  return c;
}

// A responder that takes pings and never answers: a hung worker.
caf::actor silent_responder(caf::actor_system& sys) {
  return sys.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](link_ping_atom, int32_t, uint64_t) {}}; });
}

struct Fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<Cluster> cluster = std::make_shared<Cluster>(one_worker(), engine::Topology::logical(one_worker()));
  int pair[2] = {-1, -1};
  Fixture() {
    cfg.load<caf::io::middleman>();
    sys = std::make_unique<caf::actor_system>(cfg);
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    WorkerRecord w;
    w.host = "hung";
    w.pid = 7;
    w.slots = 1;
    w.node = sys->node();
    cluster->join(w);
  }
  ~Fixture() { ::close(pair[1]); }
};

}  // namespace

TEST_CASE("a worker silent on its own link is quarantined with that reason and its link dropped") {
  Fixture f;
  const auto responder = silent_responder(*f.sys);
  {
    LinkWatch watch(*f.sys, f.cluster, std::chrono::milliseconds(50), std::chrono::milliseconds(400));
    watch.watch(1, f.sys->node(), responder, f.pair[0], "worker 1 (hung, pid 7)");
    CHECK(link_dropped(f.pair[1], std::chrono::seconds(20)));
  }
  const auto q = f.cluster->quarantine();
  REQUIRE(q.size() == 1);
  CHECK(q[0].error.find("its link went silent") != std::string::npos);
  CHECK(q[0].error.find("while the supervisor's own I/O was on time") != std::string::npos);
  caf::anon_send_exit(responder, caf::exit_reason::kill);
}

TEST_CASE("a worker that answers stays; the run's end stops the watch without judging anyone") {
  Fixture f;
  const auto responder = spawn_link_responder(*f.sys);
  {
    LinkWatch watch(*f.sys, f.cluster, std::chrono::milliseconds(50), std::chrono::seconds(5));
    watch.watch(1, f.sys->node(), responder, f.pair[0], "worker 1");
    // A few rounds of pings and answers; then the run ends (stop) with the worker alive.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    watch.stop();
  }
  CHECK(f.cluster->quarantine().empty());
  // The watch closed its end when it stopped (the descriptor was its to close).
  CHECK(link_dropped(f.pair[1], std::chrono::seconds(5)));
  caf::anon_send_exit(responder, caf::exit_reason::kill);
}

TEST_CASE("while CAF's I/O loop is stalled no worker is judged; the lateness is logged, not a quarantine") {
  Fixture f;
  const auto responder = silent_responder(*f.sys);
  std::atomic<bool> stall_over{false};
  std::atomic<bool> dropped_during_stall{false};
  {
    LinkWatch watch(*f.sys, f.cluster, std::chrono::milliseconds(50), std::chrono::milliseconds(400));
    // The I/O loop is stalled for 1.5 s from now: longer than the timeout (0.4 s), so a
    // watch that judged through it would drop the worker before the stall ends.
    f.sys->middleman().run_later([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      pollfd p{f.pair[1], POLLIN, 0};
      dropped_during_stall = ::poll(&p, 1, 0) > 0;
      stall_over = true;
    });
    watch.watch(1, f.sys->node(), responder, f.pair[0], "worker 1 (hung, pid 7)");
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (!stall_over && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(stall_over);
    CHECK(!dropped_during_stall);
    CHECK(watch.late_episodes() >= 1);
    // Once the supervisor runs on time again the silent worker is judged as ever.
    CHECK(link_dropped(f.pair[1], std::chrono::seconds(20)));
  }
  REQUIRE(f.cluster->quarantine().size() == 1);
  caf::anon_send_exit(responder, caf::exit_reason::kill);
}
