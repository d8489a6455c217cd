// Fault injection (DESIGN.md section 5): the config's faults (and --inject ones)
// as a plan every actor consults at its phase points. A fault fires once per run,
// whatever restarts follow, so a recovered run continues instead of failing again.
//
// Phase points per kind of actor (what "phase P at step S" means for it):
//   stage        forward / backward: before an op of step S; reduce: before its
//                gradient collectives
//   optim        reduce: on receiving step S's gradient shard; optimizer: on the
//                update command
//   loader       forward: before the first microbatch of step S; backward: before
//                the last one (the loader streams ahead while stages run backward)
//   coordinator  forward: when starting step S; reduce: when every norm partial of
//                step S is in; optimizer: before sending the update command;
//                checkpoint_write: before committing the manifest of step S
//   writer       optimizer: on receiving the shard copy of step S;
//                checkpoint_write: while writing it (FAIL_WRITE, CORRUPT_SHARD,
//                TRUNCATE_SHARD act here)
//   metrics      optimizer: on step S's record; checkpoint_write: on the record of
//                step S's checkpoint
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::engine {

// The names used in paths and logs: forward, backward, reduce, optimizer, checkpoint_write.
const char* phase_name(Fault::Phase p);

class FaultPlan {
 public:
  FaultPlan() = default;
  explicit FaultPlan(const Config& c);

  // The fault planned for (path, step, phase) that has not fired yet and satisfies
  // `also` (when given); marks it fired.
  std::optional<Fault> take(const std::string& path, int64_t step, Fault::Phase phase,
                            const std::function<bool(const Fault&)>& also = nullptr);
  // Whether any fault (fired or not) targets `path` (actors skip the lookups otherwise).
  bool targets(const std::string& path) const;
  int fired() const;
  // When the last fault fired (for measuring detection time).
  std::optional<std::chrono::steady_clock::time_point> last_fired_at() const;

  // A HANG fault: blocks the calling actor's thread (it stops answering) until
  // release_hangs() is called, then throws so the actor ends. In one process a hung
  // thread cannot be killed; releasing it once the supervisor has declared it
  // failed lets the group restart and the process shut down.
  [[noreturn]] void hang(const std::string& path, int64_t step, Fault::Phase phase);
  void release_hangs();

 private:
  std::vector<Fault> faults_;
  mutable std::mutex mu_;
  std::set<size_t> fired_;
  std::optional<std::chrono::steady_clock::time_point> last_fired_;
  std::condition_variable hang_cv_;
  int hung_ = 0;
  uint64_t release_generation_ = 0;
};

// What an actor does when a fault fires: throws (KILL and THROW end the actor with
// an error naming the fault; the supervisor sees an abnormal exit).
[[noreturn]] void raise_fault(const Fault& f, const std::string& path, int64_t step);

// Fires the fault planned for (path, step, phase), if any: KILL and THROW raise,
// HANG hangs. Other kinds (checkpoint damage, NaN gradients) are handled where they
// apply and are left alone here.
void check_fault(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase);

// The phases at which each kind of actor checks for faults (actor kind = first path
// component: stage, optim, loader, coordinator, writer, metrics).
std::vector<Fault::Phase> fault_phases(const std::string& actor_kind);

// Checks every planned fault against the run's actors (`actor_paths`) and the
// phases each kind honours; throws std::invalid_argument naming the fault
// (faults.fault[i]) and listing what is possible.
void check_fault_plan(const Config& c, const std::vector<std::string>& actor_paths);

}  // namespace troupe::engine
