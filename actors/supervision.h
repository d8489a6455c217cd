// Supervision declared as data, in the manner of Erlang/OTP: a supervisor is
// given child specs (how to start each child, its restart policy), a strategy and
// an intensity limit; it starts the children in order, monitors them, restarts what
// fails according to the strategy, and past the intensity limit stops every child in
// reverse start order, reports and fails upward.
//
// Children are found by path (e.g. "stage/dp1/pp0/tp0"): the supervisor keeps the
// path -> actor registry and hands it to `on_start` after every (re)start, which is
// where a group wires its members to each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/directory.h"

namespace troupe::actors {

enum class Restart : uint8_t {
  Permanent,  // always restarted
  Transient,  // restarted only after an abnormal exit
  Temporary,  // never restarted
};

enum class Strategy : uint8_t {
  OneForOne,   // restart the failed child only
  OneForAll,   // stop all other children, restart all
  RestForOne,  // stop the children started after the failed one, restart those and it
};

const char* to_string(Restart r);
const char* to_string(Strategy s);

using Registry = std::map<std::string, caf::actor>;

struct ChildSpec {
  std::string path;
  Restart restart = Restart::Permanent;
  // Spawns the child from the supervisor (plain self->spawn: the supervisor adds the
  // monitor). `incarnation` counts this child's starts: 0 first, 1 after one restart.
  std::function<caf::actor(caf::event_based_actor* self, int incarnation)> start;
  // Restart only this child when it fails, whatever the supervisor's strategy (a
  // data loader resumes its stream without disturbing the rest of its group).
  bool restart_alone = false;
  // Watched (> 0): the supervisor asks the child ping_atom every `heartbeat`; a child
  // that leaves one unanswered for `hang_limit` is hung, a failure like an abnormal
  // exit (its handle is abandoned: a hung thread cannot be stopped from outside).
  std::chrono::milliseconds heartbeat{0};
  std::chrono::milliseconds hang_limit{0};
};

struct FailureRecord {
  std::string path;
  std::string reason;
  double seconds_since_start = 0;  // since the supervisor started
};

struct SupervisorReport {
  std::string path;
  std::vector<FailureRecord> failures;  // every abnormal exit, in order
  std::map<std::string, int> restarts;  // restarts per child path
  int restart_events = 0;               // times the strategy restarted children
  bool gave_up = false;                 // the intensity limit was exceeded
  std::string vetoed;                   // why a restart was refused (veto_restart), or ""
  std::string start_failed;             // "<path> could not start: <why>" when a start function threw
  std::string summary;                  // one line for logs
};

struct SupervisorSpec {
  std::string path;
  Strategy strategy = Strategy::OneForOne;
  // More than max_restarts restarts within `period` and the supervisor gives up.
  int max_restarts = 3;
  std::chrono::milliseconds period{60000};
  // How long a child may take to stop after an exit request before it is killed.
  std::chrono::milliseconds shutdown_timeout{10000};
  std::vector<ChildSpec> children;
  // After (re)starting children: the full registry and the paths just started.
  std::function<void(caf::event_based_actor* self, const Registry& all,
                     const std::vector<std::string>& started)>
      on_start;
  // A child exited abnormally (called before anything is stopped or restarted), e.g.
  // to abort the communicators it belonged to so that its peers do not wait for it.
  std::function<void(const std::string& path, const std::string& reason)> on_failure;
  // A child stopped for relocate_atom (a planned move, not a failure), before it starts
  // again elsewhere: whatever it was doing is lost (e.g. a checkpoint writer's shard).
  std::function<void(const std::string& path)> on_relocated;
  // Called once, just before the supervisor exits (normally or after giving up).
  std::function<void(const SupervisorReport&)> on_exit;
  // When set, every running child is entered under its path (and removed when it stops).
  std::shared_ptr<Directory> directory;
  // A child that lived in another process ended with remote_link_unreachable: the
  // connection to its process dropped (the process died, or stopped answering
  // heartbeats). Called with the node that hosted it, first thing, also for children
  // already being stopped, so the placement can move what that process hosted before
  // anything is restarted.
  std::function<void(const std::string& path, const caf::node_id& node)> on_node_lost;
  // Asked before children are (re)started after a failure. A reason here stops every
  // child in reverse start order and ends the supervisor with report.vetoed set,
  // instead of restarting (e.g. a lost worker process with no spare to take over).
  std::function<std::optional<std::string>()> veto_restart;
  // Runs the supervisor on its own thread: its start functions may block (placing a
  // child in another process waits for that process to answer).
  bool detached = false;
};

// Messages a supervisor understands besides monitoring its children.
using registry_atom = caf::atom_constant<caf::atom("registry")>;   // -> Registry
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;   // stop children in order, quit
// A watched child's heartbeat: the supervisor asks ping_atom, the child answers pong_atom.
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
// Another actor judged a child hung (path, reason): e.g. the coordinator, a checkpoint
// writer that missed its save's deadline (writers answer no heartbeat while they write).
// The supervisor abandons it as it does a child whose heartbeat went unanswered, and
// restarts it by its strategy.
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;
// A running child to start again because where it runs changed (path, reason): e.g. a
// checkpoint writer whose rank moved to another worker process (a shrink, docs/cluster.md).
// Stopped in order and started again, as a planned move: not a failure, not counted
// against the restart intensity. One that is not running is left to its restart.
using relocate_atom = caf::atom_constant<caf::atom("relocate")>;

// Error codes a supervisor exits with.
enum class supervision_errc : uint8_t { none = 0, gave_up = 1, vetoed = 2, start_failed = 3 };

}  // namespace troupe::actors

// CAF needs this at global scope, right after the enum.
CAF_ERROR_CODE_ENUM(troupe::actors::supervision_errc, "supervise")

namespace troupe::actors {

// Spawns a supervisor for `spec` (event-based: it does no blocking work).
caf::actor spawn_supervisor(caf::actor_system& sys, SupervisorSpec spec);

// Renders an actor's exit reason readably ("normal", "kill", the error's text).
std::string describe_exit(caf::actor_system& sys, const caf::error& reason);

// Makes an exception thrown by one of the actor's handlers end the actor with
// sec::runtime_error carrying "<path>: <what>" as its reason (CAF's default only
// says "runtime_error"), and logs it.
void exit_on_exception(caf::scheduled_actor* self, std::string path);

}  // namespace troupe::actors
