// Fault injection (docs/runtime.md, "Fault injection"): the config's faults (and --inject ones)
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
//
// Across processes (cluster mode) every process holds a copy of the plan: a worker
// reports each fault that fires on it to the supervisor (the fire hook), and the
// supervisor hands the indices fired so far to every actor it places, so a fault
// still fires once per run when its actor moves to another worker. KILL_PROCESS
// kills the hosting worker process with SIGKILL, STOP_PROCESS stops it with SIGSTOP
// (the process fault hook).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/device.h"
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
  // Indices (into faults.fault) of the faults fired so far, ascending.
  std::vector<int32_t> fired_indices() const;
  // Marks faults fired elsewhere (another process of the run) as fired here.
  void mark_fired(const std::vector<int32_t>& indices);
  // Called after a fault fires, with its index, outside the plan's lock (a worker
  // reports it to the supervisor before the fault acts).
  void set_fire_hook(std::function<void(int32_t index, const Fault& f)> hook);
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
  std::function<void(int32_t, const Fault&)> fire_hook_;
  std::condition_variable hang_cv_;
  int hung_ = 0;
  uint64_t release_generation_ = 0;
};

// What an actor does when a fault fires: throws (KILL and THROW end the actor with
// an error naming the fault; the supervisor sees an abnormal exit). KILL_PROCESS and
// STOP_PROCESS first call the process fault hook (a worker kills or stops itself);
// should the process go on (continued after SIGSTOP, or no hook), it throws like KILL.
[[noreturn]] void raise_fault(const Fault& f, const std::string& path, int64_t step);

// The process-wide action for KILL_PROCESS and STOP_PROCESS, set by a worker process;
// it receives the fault and its description.
void set_process_fault_hook(std::function<void(const Fault& f, const std::string& what)> hook);

// Fires the fault planned for (path, step, phase), if any: KILL, THROW, KILL_PROCESS
// and STOP_PROCESS raise, HANG hangs, DELAY sleeps and returns. Other kinds (checkpoint damage, NaN gradients) are handled where they
// apply and are left alone here.
void check_fault(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase);
// Only a DELAY planned for (path, step, phase): for a point that comes before the
// phase's other faults act (the coordinator's opening of a save).
void check_delay(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase);

// NAN_GRADIENT: when a fault planned for (path, step, backward) targets microbatch
// `mb`, writes a NaN into the first gradient of `grads` (memory of `device`), logs it
// and marks the fault fired. Stages call it before the backward of `mb` adds to the
// gradients, so the NaN stays.
void inject_nan_gradient(FaultPlan* plan, const std::string& path, int64_t step, int32_t mb,
                         kernels::Device& device, float* grads);

// The phases at which each kind of actor checks for faults (actor kind = first path
// component: stage, optim, loader, coordinator, writer, metrics).
std::vector<Fault::Phase> fault_phases(const std::string& actor_kind);

// Checks every planned fault against the run's actors (`actor_paths`) and the
// phases each kind honours; throws std::invalid_argument naming the fault
// (faults.fault[i]) and listing what is possible. KILL_PROCESS and STOP_PROCESS need
// cluster mode and an actor that lives on a worker (stage, optim, loader, writer).
void check_fault_plan(const Config& c, const std::vector<std::string>& actor_paths);

}  // namespace troupe::engine
