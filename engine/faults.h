// Fault injection (DESIGN.md section 5): the config's faults (and --inject ones)
// as a plan every actor consults at its phase points. A fault fires once per run,
// whatever restarts follow, so a recovered run continues instead of failing again.
#pragma once

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

 private:
  std::vector<Fault> faults_;
  mutable std::mutex mu_;
  std::set<size_t> fired_;
};

// What an actor does when a fault fires: throws (KILL and THROW end the actor with
// an error naming the fault; the supervisor sees an abnormal exit).
[[noreturn]] void raise_fault(const Fault& f, const std::string& path, int64_t step);

}  // namespace troupe::engine
