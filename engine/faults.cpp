#include "engine/faults.h"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::engine {

const char* phase_name(Fault::Phase p) {
  switch (p) {
    case Fault::FORWARD: return "forward";
    case Fault::BACKWARD: return "backward";
    case Fault::REDUCE: return "reduce";
    case Fault::OPTIMIZER: return "optimizer";
    case Fault::CHECKPOINT_WRITE: return "checkpoint_write";
  }
  return "?";
}

FaultPlan::FaultPlan(const Config& c) : faults_(c.faults().fault().begin(), c.faults().fault().end()) {}

std::optional<Fault> FaultPlan::take(const std::string& path, int64_t step, Fault::Phase phase,
                                     const std::function<bool(const Fault&)>& also) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.actor() == path && f.step() == step && f.phase() == phase && !fired_.count(i) &&
        (!also || also(f))) {
      fired_.insert(i);
      return f;
    }
  }
  return std::nullopt;
}

bool FaultPlan::targets(const std::string& path) const {
  for (const auto& f : faults_)
    if (f.actor() == path) return true;
  return false;
}

int FaultPlan::fired() const {
  std::lock_guard lock(mu_);
  return int(fired_.size());
}

void raise_fault(const Fault& f, const std::string& path, int64_t step) {
  throw std::runtime_error(fmt::format("injected {} fault in {} at step {} during {}",
                                       Fault::Kind_Name(f.kind()), path, step, phase_name(f.phase())));
}

}  // namespace troupe::engine
