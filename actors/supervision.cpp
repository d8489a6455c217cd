#include "actors/supervision.h"

#include <algorithm>
#include <deque>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::actors {
namespace {

using stop_timeout_atom = caf::atom_constant<caf::atom("stoptmo")>;
using start_failed_atom = caf::atom_constant<caf::atom("startfail")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using Clock = std::chrono::steady_clock;

struct Child {
  caf::actor handle;  // invalid while not running
  int incarnation = -1;
  bool running = false;
  // Watched children (ChildSpec::heartbeat): when the unanswered ping went out.
  std::optional<Clock::time_point> ping_sent;
};

// A failure seen while a stop sequence was under way, handled after it.
struct PendingFailure {
  size_t index;
  bool abnormal;
};

struct SupervisorState {
  SupervisorSpec spec;
  std::vector<Child> children;
  std::map<caf::actor_addr, size_t> by_addr;
  std::deque<Clock::time_point> restart_times;
  Clock::time_point started_at = Clock::now();
  SupervisorReport report;
  // Stop sequence: children to stop, one at a time, then `then_`.
  std::deque<size_t> stop_queue;
  std::optional<size_t> stopping;
  std::function<void()> then_;
  std::vector<PendingFailure> pending;
  bool exiting = false;
};

using Self = caf::stateful_actor<SupervisorState>;

bool is_normal_exit(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
}

Registry registry_of(const SupervisorState& st) {
  Registry r;
  for (size_t i = 0; i < st.children.size(); ++i)
    if (st.children[i].running) r[st.spec.children[i].path] = st.children[i].handle;
  return r;
}

// Starts `which` in order. A start function that throws (a checkpoint that cannot be
// read, a placement that fails) is a failed start: the children not yet started stay
// down, on_start is not called, and the supervisor stops what runs and exits with
// start_failed (start_failed_atom, handled once this call has returned).
void start_children(Self* self, const std::vector<size_t>& which) {
  auto& st = self->state;
  std::vector<std::string> started;
  for (size_t i : which) {
    auto& c = st.children[i];
    c.incarnation += 1;
    try {
      c.handle = st.spec.children[i].start(self, c.incarnation);
      if (!c.handle) throw std::runtime_error("its start function returned no actor");
    } catch (const std::exception& e) {
      const std::string reason = fmt::format("could not start: {}", e.what());
      spdlog::error("{}: {}", st.spec.children[i].path, reason);
      st.report.failures.push_back({st.spec.children[i].path, reason,
                                    std::chrono::duration<double>(Clock::now() - st.started_at).count()});
      st.report.start_failed = st.spec.children[i].path + " " + reason;
      self->send(self, start_failed_atom::value);
      return;
    }
    self->monitor(c.handle);
    st.by_addr[c.handle.address()] = i;
    c.running = true;
    c.ping_sent.reset();
    started.push_back(st.spec.children[i].path);
    if (st.spec.directory) st.spec.directory->put(st.spec.children[i].path, c.handle);
  }
  if (st.spec.on_start) st.spec.on_start(self, registry_of(st), started);
}

void handle_failure(Self* self, size_t index, bool abnormal);

void run_pending(Self* self) {
  auto& st = self->state;
  while (!st.pending.empty() && !st.stopping && st.stop_queue.empty() && !st.exiting) {
    auto f = st.pending.front();
    st.pending.erase(st.pending.begin());
    handle_failure(self, f.index, f.abnormal);
  }
}

void stop_next(Self* self) {
  auto& st = self->state;
  while (!st.stop_queue.empty()) {
    const size_t i = st.stop_queue.front();
    st.stop_queue.pop_front();
    auto& c = st.children[i];
    if (!c.running) continue;
    st.stopping = i;
    self->send_exit(c.handle, caf::exit_reason::user_shutdown);
    self->delayed_send(self, st.spec.shutdown_timeout, stop_timeout_atom::value, uint64_t(i),
                       int32_t(c.incarnation));
    return;
  }
  st.stopping.reset();
  auto then = std::move(st.then_);
  st.then_ = nullptr;
  if (then) then();
  run_pending(self);
}

// Stops `which` in the given order (callers pass reverse start order), then runs `then`.
void stop_then(Self* self, std::vector<size_t> which, std::function<void()> then) {
  auto& st = self->state;
  st.stop_queue.assign(which.begin(), which.end());
  st.then_ = std::move(then);
  stop_next(self);
}

std::vector<size_t> running_reversed(const SupervisorState& st, size_t from = 0) {
  std::vector<size_t> out;
  for (size_t i = st.children.size(); i-- > from;)
    if (st.children[i].running) out.push_back(i);
  return out;
}

void finish(Self* self, caf::error reason) {
  auto& st = self->state;
  st.exiting = true;
  const int total = st.report.restart_events;
  if (!st.report.start_failed.empty())
    st.report.summary = fmt::format("{}: {}", st.spec.path, st.report.start_failed);
  else if (!st.report.vetoed.empty())
    st.report.summary = fmt::format("{}: stopped after {} failure(s) and {} restart(s): {}", st.spec.path,
                                    st.report.failures.size(), total, st.report.vetoed);
  else if (st.report.gave_up)
    st.report.summary = fmt::format(
        "{}: gave up after {} restart(s) in {:.1f} s: more than {} within {} ms; last failure: {} ({})",
        st.spec.path, total,
        std::chrono::duration<double>(Clock::now() - st.started_at).count(), st.spec.max_restarts,
        st.spec.period.count(), st.report.failures.empty() ? "-" : st.report.failures.back().path,
        st.report.failures.empty() ? "-" : st.report.failures.back().reason);
  else
    st.report.summary = fmt::format("{}: stopped after {} failure(s) and {} restart(s)", st.spec.path,
                                    st.report.failures.size(), total);
  if (st.spec.on_exit) st.spec.on_exit(st.report);
  self->quit(std::move(reason));
}

void give_up(Self* self) {
  self->state.report.gave_up = true;
  stop_then(self, running_reversed(self->state),
            [self] { finish(self, caf::make_error(supervision_errc::gave_up)); });
}

// A restart refused by veto_restart: stop everything in order and exit.
bool vetoed(Self* self) {
  auto& st = self->state;
  if (!st.spec.veto_restart) return false;
  auto why = st.spec.veto_restart();
  if (!why) return false;
  st.report.vetoed = *why;
  spdlog::error("{}: not restarting: {}", st.spec.path, *why);
  stop_then(self, running_reversed(st), [self] { finish(self, caf::make_error(supervision_errc::vetoed)); });
  return true;
}

void handle_failure(Self* self, size_t index, bool abnormal) {
  auto& st = self->state;
  const auto& cs = st.spec.children[index];
  const bool restart = cs.restart == Restart::Permanent || (cs.restart == Restart::Transient && abnormal);
  if (!restart) {
    if (st.spec.on_start) st.spec.on_start(self, registry_of(st), {});
    return;
  }
  if (vetoed(self)) return;
  const auto now = Clock::now();
  st.restart_times.push_back(now);
  while (!st.restart_times.empty() && now - st.restart_times.front() > st.spec.period)
    st.restart_times.pop_front();
  if (int(st.restart_times.size()) > st.spec.max_restarts) {
    give_up(self);
    return;
  }
  st.report.restart_events += 1;
  switch (cs.restart_alone ? Strategy::OneForOne : st.spec.strategy) {
    case Strategy::OneForOne:
      st.report.restarts[cs.path] += 1;
      start_children(self, {index});
      break;
    case Strategy::OneForAll:
    case Strategy::RestForOne: {
      const size_t from = st.spec.strategy == Strategy::OneForAll ? 0 : index;
      stop_then(self, running_reversed(st, from), [self, from] {
        if (vetoed(self)) return;  // what was lost while stopping may leave nothing to restart on
        auto& s = self->state;
        std::vector<size_t> again;
        for (size_t i = from; i < s.children.size(); ++i) {
          // Temporary children are stopped but never restarted (as in OTP).
          if (s.spec.children[i].restart == Restart::Temporary) continue;
          again.push_back(i);
          s.report.restarts[s.spec.children[i].path] += 1;
        }
        start_children(self, again);
      });
      break;
    }
  }
}

// Child `i` ended (or was found hung): records an abnormal end and restarts it (or
// them) by the strategy, once any stop sequence under way is over.
void child_failed(Self* self, size_t i, const std::string& reason, bool abnormal) {
  auto& st = self->state;
  if (abnormal) {
    st.report.failures.push_back(
        {st.spec.children[i].path, reason, std::chrono::duration<double>(Clock::now() - st.started_at).count()});
    if (st.spec.on_failure) st.spec.on_failure(st.spec.children[i].path, reason);
  }
  if (st.exiting) return;
  if (st.stopping || !st.stop_queue.empty()) {
    st.pending.push_back({i, abnormal});
    return;
  }
  handle_failure(self, i, abnormal);
}

// Child `i` waits in the stop sequence under way.
bool queued_to_stop(const SupervisorState& st, size_t i) {
  return std::find(st.stop_queue.begin(), st.stop_queue.end(), i) != st.stop_queue.end();
}

bool being_stopped(const SupervisorState& st, size_t i) {
  return (st.stopping && *st.stopping == i) || queued_to_stop(st, i);
}

// A watched child left its heartbeat unanswered past its limit: it is hung. A hung
// thread cannot be stopped from outside, so its handle is abandoned (no longer
// monitored, out of the directory, sent a kill it will see if it ever returns) and it
// fails like a child that exited.
void abandon_child(Self* self, size_t i, const std::string& reason) {
  auto& st = self->state;
  auto& c = st.children[i];
  const auto& cs = st.spec.children[i];
  spdlog::error("{}: {}", cs.path, reason);
  self->demonitor(c.handle);
  st.by_addr.erase(c.handle.address());
  if (st.spec.directory) st.spec.directory->erase(cs.path, c.handle.address());
  self->send_exit(c.handle, caf::exit_reason::kill);
  c.running = false;
  c.handle = nullptr;
  c.ping_sent.reset();
  child_failed(self, i, reason, /*abnormal=*/true);
}

void child_hung(Self* self, size_t i, double silent_s) {
  const auto& cs = self->state.spec.children[i];
  abandon_child(self, i, fmt::format("hung: its supervisor's heartbeat went unanswered for {:.1f} s (limit {:g} s)",
                                     silent_s, std::chrono::duration<double>(cs.hang_limit).count()));
}

// Every running watched child gets a ping when its last one was answered; one whose
// ping is older than its hang limit is hung.
void watch_children(Self* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  for (size_t i = 0; i < st.children.size(); ++i) {
    auto& c = st.children[i];
    const auto& cs = st.spec.children[i];
    if (cs.heartbeat.count() <= 0 || !c.running || being_stopped(st, i) || st.exiting) continue;
    if (c.ping_sent) {
      if (cs.hang_limit.count() > 0 && now - *c.ping_sent > cs.hang_limit)
        child_hung(self, i, std::chrono::duration<double>(now - *c.ping_sent).count());
      continue;
    }
    c.ping_sent = now;
    const int incarnation = c.incarnation;
    self->request(c.handle, caf::infinite, ping_atom::value)
        .then(
            [self, i, incarnation](pong_atom) {
              auto& child = self->state.children[i];
              if (child.incarnation == incarnation) child.ping_sent.reset();
            },
            [](caf::error&) {});  // it ended: its down message says how
  }
}

// The shortest heartbeat among the watched children (0: none watched).
std::chrono::milliseconds watch_period(const SupervisorSpec& spec) {
  std::chrono::milliseconds p{0};
  for (const auto& cs : spec.children)
    if (cs.heartbeat.count() > 0 && (p.count() == 0 || cs.heartbeat < p)) p = cs.heartbeat;
  return p;
}

void on_down(Self* self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto it = st.by_addr.find(dm.source);
  if (it == st.by_addr.end()) return;
  const size_t i = it->second;
  st.by_addr.erase(it);
  if (dm.reason == caf::exit_reason::remote_link_unreachable && st.spec.on_node_lost)
    st.spec.on_node_lost(st.spec.children[i].path, dm.source.node());
  if (st.spec.directory) st.spec.directory->erase(st.spec.children[i].path, dm.source);
  auto& c = st.children[i];
  c.running = false;
  c.handle = nullptr;
  if (st.stopping && *st.stopping == i) {  // a stop we asked for
    stop_next(self);
    return;
  }
  // Queued to be stopped anyway (a restart or shutdown is under way): its end is a
  // consequence of what is being handled, not a failure of its own.
  if (queued_to_stop(st, i)) return;
  child_failed(self, i, describe_exit(self->system(), dm.reason), !is_normal_exit(dm.reason));
}

}  // namespace

const char* to_string(Restart r) {
  switch (r) {
    case Restart::Permanent: return "permanent";
    case Restart::Transient: return "transient";
    case Restart::Temporary: return "temporary";
  }
  return "?";
}

const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::OneForOne: return "one_for_one";
    case Strategy::OneForAll: return "one_for_all";
    case Strategy::RestForOne: return "rest_for_one";
  }
  return "?";
}

std::string describe_exit(caf::actor_system& sys, const caf::error& reason) {
  if (!reason) return "normal";
  // An error carrying a text (exit_on_exception) renders as that text.
  if (reason.category() == caf::atom("system") && !reason.context().empty() &&
      reason.context().match_elements<std::string>())
    return reason.context().get_as<std::string>(0);
  return sys.render(reason);
}

void exit_on_exception(caf::scheduled_actor* self, std::string path) {
  self->set_exception_handler([path](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    std::string what;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
      what = "unknown exception";
    }
    // Most of the actors' own errors name the actor already: it is not said twice.
    if (what.rfind(path + ": ", 0) != 0) what = path + ": " + what;
    spdlog::error("{}", what);
    return caf::make_error(caf::sec::runtime_error, what);
  });
}

namespace {

caf::behavior supervisor_impl(Self* self, SupervisorSpec spec) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.report.path = st.spec.path;
  st.children.resize(st.spec.children.size());
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  // An exit request from our own parent: stop the children in order first.
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (self->state.exiting) return;
    auto reason = em.reason;
    stop_then(self, running_reversed(self->state), [self, reason] { finish(self, reason); });
  });
  std::vector<size_t> all(st.children.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  start_children(self, all);
  if (const auto period = watch_period(st.spec); period.count() > 0) self->send(self, watch_atom::value);
  return {
      [self](registry_atom) { return registry_of(self->state); },
      [self](watch_atom) {
        if (self->state.exiting) return;
        watch_children(self);
        self->delayed_send(self, watch_period(self->state.spec), watch_atom::value);
      },
      [self](abandon_atom, const std::string& path, const std::string& reason) {
        auto& st = self->state;
        if (st.exiting) return;
        for (size_t i = 0; i < st.children.size(); ++i)
          if (st.spec.children[i].path == path && st.children[i].running && !being_stopped(st, i))
            return abandon_child(self, i, "hung: " + reason);
      },
      [self](relocate_atom, const std::string& path, const std::string& reason) {
        auto& st = self->state;
        if (st.exiting) return;
        // Another stop sequence first: it owns the stop queue until it is over.
        if (st.stopping || !st.stop_queue.empty()) {
          self->delayed_send(self, std::chrono::milliseconds(50), relocate_atom::value, path, reason);
          return;
        }
        for (size_t i = 0; i < st.children.size(); ++i) {
          if (st.spec.children[i].path != path || !st.children[i].running) continue;
          spdlog::info("{}: starts again elsewhere: {}", path, reason);
          st.report.restarts[path] += 1;
          stop_then(self, {i}, [self, i, path] {
            if (self->state.spec.on_relocated) self->state.spec.on_relocated(path);
            if (!self->state.exiting) start_children(self, {i});
          });
          return;
        }
      },
      [self](shutdown_atom) {
        if (self->state.exiting) return;
        stop_then(self, running_reversed(self->state),
                  [self] { finish(self, caf::exit_reason::normal); });
      },
      [self](start_failed_atom) {
        if (self->state.exiting) return;
        self->state.exiting = true;  // no failure seen while stopping is restarted
        stop_then(self, running_reversed(self->state),
                  [self] { finish(self, caf::make_error(supervision_errc::start_failed)); });
      },
      [self](stop_timeout_atom, uint64_t index, int32_t incarnation) {
        auto& c = self->state.children[index];
        if (self->state.stopping == index && c.running && c.incarnation == incarnation)
          self->send_exit(c.handle, caf::exit_reason::kill);
      },
  };
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, SupervisorSpec spec) {
  if (spec.detached) return sys.spawn<caf::detached>(supervisor_impl, std::move(spec));
  return sys.spawn(supervisor_impl, std::move(spec));
}

}  // namespace troupe::actors
