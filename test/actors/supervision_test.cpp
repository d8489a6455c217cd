// Declared supervision: strategies, restart policies, intensity, ordered shutdown.
#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/supervision.h"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

using incarnation_atom = caf::atom_constant<caf::atom("incarn")>;
using crash_atom = caf::atom_constant<caf::atom("crash")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;

// Records every start and stop, in order, across threads.
struct Journal {
  std::mutex mu;
  std::vector<std::string> events;
  void add(std::string e) {
    std::lock_guard lock(mu);
    events.push_back(std::move(e));
  }
  std::vector<std::string> take() {
    std::lock_guard lock(mu);
    return std::exchange(events, {});
  }
};

struct ToyState {
  std::string path;
  int incarnation = 0;
  Journal* journal = nullptr;
};

caf::behavior toy(caf::stateful_actor<ToyState>* self, std::string path, int incarnation, Journal* j) {
  self->state = {path, incarnation, j};
  self->attach_functor([path, j](const caf::error&) { j->add("stop " + path); });
  // Exit with the exception's text as the reason, without CAF's stderr print.
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return caf::make_error(caf::sec::runtime_error, x.what());
    }
  });
  return {
      [self](incarnation_atom) { return self->state.incarnation; },
      [self](crash_atom) -> int32_t { throw std::runtime_error("boom in " + self->state.path); },
      [self](finish_atom) { self->quit(); },
  };
}

SupervisorSpec make_spec(Strategy strategy, Journal* j, int max_restarts = 3,
                         std::vector<Restart> policies = {Restart::Permanent, Restart::Permanent,
                                                          Restart::Permanent}) {
  SupervisorSpec spec;
  spec.path = "group";
  spec.strategy = strategy;
  spec.max_restarts = max_restarts;
  spec.period = 10s;
  const char* names[] = {"a", "b", "c"};
  for (size_t i = 0; i < policies.size(); ++i) {
    std::string path = names[i];
    // The start is journaled by the supervisor's start function: it is the order of
    // spawning that the strategy defines (actors initialise asynchronously).
    spec.children.push_back({path, policies[i], [path, j](caf::event_based_actor* self, int inc) {
                               j->add("start " + path + "#" + std::to_string(inc));
                               return self->spawn(toy, path, inc, j);
                             }});
  }
  return spec;
}

Registry registry(caf::scoped_actor& self, const caf::actor& sup) {
  Registry r;
  self->request(sup, 5s, registry_atom::value).receive([&](Registry& x) { r = x; },
                                                       [](caf::error&) { FAIL("no registry"); });
  return r;
}

int ping(caf::scoped_actor& self, const caf::actor& a) {
  int out = -1;
  self->request(a, 5s, incarnation_atom::value).receive([&](int x) { out = x; }, [](caf::error&) {});
  return out;
}

// Waits (at most `tries` looks, `pause` apart) until the registry shows `path` with a
// handle other than `before`; returns it, or a null handle.
caf::actor wait_for_successor(caf::scoped_actor& self, const caf::actor& sup, const std::string& path,
                              const caf::actor& before, int tries, std::chrono::milliseconds pause) {
  for (int i = 0; i < tries; ++i) {
    auto r = registry(self, sup);
    if (r.count(path) && r.at(path) != before) return r.at(path);
    std::this_thread::sleep_for(pause);
  }
  return {};
}

// Crashes `path` and waits until the registry shows it restarted.
void crash_and_wait(caf::scoped_actor& self, const caf::actor& sup, const std::string& path) {
  auto before = registry(self, sup).at(path);
  self->request(before, 5s, crash_atom::value).receive([](int32_t) {}, [](caf::error&) {});
  if (!wait_for_successor(self, sup, path, before, 500, 2ms)) FAIL("child was not restarted: " << path);
}

std::string fmt_events(const std::vector<std::string>& v) {
  std::string out;
  for (auto& e : v) out += e + "; ";
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("one_for_one restarts only the failed child") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  auto sup = spawn_supervisor(sys, make_spec(Strategy::OneForOne, &j));
  caf::scoped_actor self{sys};
  CHECK(registry(self, sup).size() == 3);
  j.take();
  crash_and_wait(self, sup, "b");
  auto r = registry(self, sup);
  CHECK(ping(self, r.at("a")) == 0);
  CHECK(ping(self, r.at("b")) == 1);
  CHECK(ping(self, r.at("c")) == 0);
  auto ev = j.take();
  CHECK(contains(ev, "stop b"));
  CHECK(contains(ev, "start b#1"));
  CHECK(!contains(ev, "stop a"));
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
  // Ordered shutdown: reverse start order.
  CHECK(j.take() == std::vector<std::string>{"stop c", "stop b", "stop a"});
}

TEST_CASE("one_for_all stops the others in reverse order and restarts everyone in order") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  auto sup = spawn_supervisor(sys, make_spec(Strategy::OneForAll, &j));
  caf::scoped_actor self{sys};
  registry(self, sup);
  j.take();
  crash_and_wait(self, sup, "b");
  // Wait for all three to be on incarnation 1.
  for (int i = 0; i < 500; ++i) {
    auto r = registry(self, sup);
    if (r.size() == 3 && ping(self, r.at("a")) == 1 && ping(self, r.at("c")) == 1) break;
    std::this_thread::sleep_for(2ms);
  }
  auto ev = j.take();
  CAPTURE(fmt_events(ev));
  CHECK(ev == std::vector<std::string>{"stop b", "stop c", "stop a", "start a#1", "start b#1", "start c#1"});
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  self->wait_for(sup);
}

TEST_CASE("rest_for_one restarts the failed child and those started after it") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  auto sup = spawn_supervisor(sys, make_spec(Strategy::RestForOne, &j));
  caf::scoped_actor self{sys};
  registry(self, sup);
  j.take();
  crash_and_wait(self, sup, "b");
  for (int i = 0; i < 500; ++i) {
    auto r = registry(self, sup);
    if (r.size() == 3 && ping(self, r.at("c")) == 1) break;
    std::this_thread::sleep_for(2ms);
  }
  auto r = registry(self, sup);
  CHECK(ping(self, r.at("a")) == 0);
  CHECK(ping(self, r.at("b")) == 1);
  CHECK(ping(self, r.at("c")) == 1);
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
}

TEST_CASE("transient children that finish normally are not restarted; temporary never are") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  auto sup = spawn_supervisor(
      sys, make_spec(Strategy::OneForOne, &j, 3, {Restart::Transient, Restart::Temporary, Restart::Transient}));
  caf::scoped_actor self{sys};
  auto r = registry(self, sup);
  self->send(r.at("a"), finish_atom::value);
  self->request(r.at("b"), 5s, crash_atom::value).receive([](int32_t) {}, [](caf::error&) {});
  for (int i = 0; i < 500 && registry(self, sup).size() != 1; ++i) std::this_thread::sleep_for(2ms);
  CHECK(registry(self, sup).size() == 1);
  crash_and_wait(self, sup, "c");  // transient + abnormal: restarted
  CHECK(registry(self, sup).size() == 1);
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
}

TEST_CASE("past the intensity limit the supervisor stops everyone, reports and fails") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  SupervisorReport report;
  std::mutex mu;
  auto spec = make_spec(Strategy::OneForOne, &j, 2);
  spec.on_exit = [&](const SupervisorReport& r) {
    std::lock_guard lock(mu);
    report = r;
  };
  std::vector<std::string> failed;
  spec.on_failure = [&](const std::string& path, const std::string&) {
    std::lock_guard lock(mu);
    failed.push_back(path);
  };
  auto sup = spawn_supervisor(sys, spec);
  caf::scoped_actor self{sys};
  self->monitor(sup);
  crash_and_wait(self, sup, "a");
  crash_and_wait(self, sup, "a");
  auto third = registry(self, sup).at("a");
  self->request(third, 5s, crash_atom::value).receive([](int32_t) {}, [](caf::error&) {});
  caf::error exit_reason;
  self->receive([&](caf::down_msg& dm) { exit_reason = dm.reason; });
  CHECK(exit_reason == caf::make_error(supervision_errc::gave_up));
  std::lock_guard lock(mu);
  CHECK(report.gave_up);
  CHECK(report.failures.size() == 3);
  CHECK(report.restarts.at("a") == 2);
  CHECK(report.failures[0].reason.find("boom in a") != std::string::npos);
  CHECK(report.summary.find("gave up after 2 restart(s)") != std::string::npos);
  CHECK(failed == std::vector<std::string>{"a", "a", "a"});
  auto ev = j.take();
  // The survivors were stopped in reverse start order.
  auto c = std::find(ev.begin(), ev.end(), "stop c");
  auto b = std::find(ev.begin(), ev.end(), "stop b");
  CHECK(c < b);
  CHECK(b != ev.end());
}

TEST_CASE("a child whose start throws ends its supervisor with start_failed, naming it; the rest are stopped") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  SupervisorReport report;
  std::mutex mu;
  auto spec = make_spec(Strategy::OneForAll, &j);
  spec.children[1].start = [](caf::event_based_actor*, int) -> caf::actor {
    throw std::runtime_error("checkpoint /x: damaged");
  };
  spec.on_exit = [&](const SupervisorReport& r) {
    std::lock_guard lock(mu);
    report = r;
  };
  auto sup = spawn_supervisor(sys, spec);
  caf::scoped_actor self{sys};
  self->monitor(sup);
  caf::error exit_reason;
  self->receive([&](caf::down_msg& dm) { exit_reason = dm.reason; });
  CHECK(exit_reason == caf::make_error(supervision_errc::start_failed));
  std::lock_guard lock(mu);
  CHECK(report.summary == "group: b could not start: checkpoint /x: damaged");
  REQUIRE(report.failures.size() == 1);
  CHECK(report.failures[0].path == "b");
  // a started and was stopped; c was never started.
  const auto ev = j.take();
  CHECK(contains(ev, "start a#0"));
  CHECK(contains(ev, "stop a"));
  CHECK(!contains(ev, "start c#0"));
}

namespace {

using block_atom = caf::atom_constant<caf::atom("block")>;

// Answers its supervisor's heartbeat until told to block; then its thread waits until
// `release` is set, as a hung actor would.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

caf::behavior watched(caf::event_based_actor* self, Gate* gate) {
  (void)self;
  return {
      [](ping_atom) { return pong_atom::value; },
      [gate](block_atom) { gate->wait(); },
  };
}

}  // namespace

TEST_CASE("a watched child that leaves its heartbeat unanswered is hung: abandoned and restarted") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Gate gate;
  Journal j;
  std::vector<std::string> reasons;
  std::mutex mu;
  SupervisorSpec spec;
  spec.path = "group";
  spec.strategy = Strategy::OneForOne;
  ChildSpec child{"w", Restart::Permanent, [&](caf::event_based_actor* self, int inc) {
                    j.add("start w#" + std::to_string(inc));
                    return self->spawn<caf::detached>(watched, &gate);
                  }};
  child.heartbeat = 20ms;
  child.hang_limit = 300ms;
  spec.children.push_back(child);
  spec.on_failure = [&](const std::string& path, const std::string& reason) {
    std::lock_guard lock(mu);
    reasons.push_back(path + ": " + reason);
  };
  auto sup = spawn_supervisor(sys, spec);
  caf::scoped_actor self{sys};
  // Answering, it stays (well past the limit).
  std::this_thread::sleep_for(600ms);
  auto first = registry(self, sup).at("w");
  CHECK(j.take() == std::vector<std::string>{"start w#0"});
  self->send(first, block_atom::value);
  const caf::actor second = wait_for_successor(self, sup, "w", first, 1000, 5ms);
  REQUIRE(second);
  CHECK(j.take() == std::vector<std::string>{"start w#1"});
  {
    std::lock_guard lock(mu);
    REQUIRE(reasons.size() == 1);
    CHECK(reasons[0].find("w: hung: its supervisor's heartbeat went unanswered for") == 0);
  }
  gate.release();
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
}

TEST_CASE("a child that another actor judges hung (abandon_atom) is abandoned and restarted; unknown paths change nothing") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Gate gate;
  Journal j;
  std::vector<std::string> reasons;
  std::mutex mu;
  SupervisorSpec spec;
  spec.path = "writers";
  spec.strategy = Strategy::OneForOne;
  // Not watched: like a checkpoint writer, it answers no heartbeat while it works.
  spec.children.push_back({"w", Restart::Permanent, [&](caf::event_based_actor* self, int inc) {
                             j.add("start w#" + std::to_string(inc));
                             return self->spawn<caf::detached>(watched, &gate);
                           }});
  spec.on_failure = [&](const std::string& path, const std::string& reason) {
    std::lock_guard lock(mu);
    reasons.push_back(path + ": " + reason);
  };
  auto sup = spawn_supervisor(sys, spec);
  caf::scoped_actor self{sys};
  auto first = registry(self, sup).at("w");
  CHECK(j.take() == std::vector<std::string>{"start w#0"});
  self->send(first, block_atom::value);
  self->send(sup, abandon_atom::value, std::string("nobody"), std::string("no such child"));
  self->send(sup, abandon_atom::value, std::string("w"), std::string("its save missed the deadline"));
  const caf::actor second = wait_for_successor(self, sup, "w", first, 1000, 5ms);
  REQUIRE(second);
  CHECK(j.take() == std::vector<std::string>{"start w#1"});
  {
    std::lock_guard lock(mu);
    CHECK(reasons == std::vector<std::string>{"w: hung: its save missed the deadline"});
  }
  gate.release();
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
}

TEST_CASE("relocate_atom starts a running child again as a planned move: no failure, no restart counted against "
          "the intensity") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  Journal j;
  // At most one restart in the period: three moves must not make the supervisor give up.
  auto spec = make_spec(Strategy::OneForOne, &j, /*max_restarts=*/1);
  std::vector<std::string> failures;
  std::mutex mu;
  spec.on_failure = [&](const std::string& path, const std::string& reason) {
    std::lock_guard lock(mu);
    failures.push_back(path + ": " + reason);
  };
  auto sup = spawn_supervisor(sys, spec);
  caf::scoped_actor self{sys};
  (void)registry(self, sup);
  j.take();
  for (int move = 1; move <= 3; ++move) {
    const auto before = registry(self, sup).at("b");
    self->send(sup, relocate_atom::value, std::string("b"), std::string("its rank moved"));
    self->send(sup, relocate_atom::value, std::string("nobody"), std::string("no such child"));
    const caf::actor after = wait_for_successor(self, sup, "b", before, 1000, 2ms);
    REQUIRE(after);
    CHECK(ping(self, after) == move);
    // Only b moved (stopped, and its successor started); a and c kept running.
    const auto events = j.take();
    CHECK(events.size() == 2);
    CHECK(contains(events, "stop b"));
    CHECK(contains(events, "start b#" + std::to_string(move)));
  }
  {
    std::lock_guard lock(mu);
    CHECK(failures.empty());
  }
  // A crash after the moves is the first counted restart: still within the limit.
  crash_and_wait(self, sup, "a");
  self->send(sup, shutdown_atom::value);
  self->wait_for(sup);
}
