#include "engine/faults.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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
      last_fired_ = std::chrono::steady_clock::now();
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

std::optional<std::chrono::steady_clock::time_point> FaultPlan::last_fired_at() const {
  std::lock_guard lock(mu_);
  return last_fired_;
}

void FaultPlan::hang(const std::string& path, int64_t step, Fault::Phase phase) {
  spdlog::warn("{}: injected hang at step {} during {}", path, step, phase_name(phase));
  std::unique_lock lock(mu_);
  const uint64_t gen = release_generation_;
  ++hung_;
  hang_cv_.wait(lock, [&] { return release_generation_ != gen; });
  --hung_;
  throw std::runtime_error(fmt::format("injected HANG fault in {} at step {} during {} (released)", path, step,
                                       phase_name(phase)));
}

void FaultPlan::release_hangs() {
  std::lock_guard lock(mu_);
  ++release_generation_;
  hang_cv_.notify_all();
}

void raise_fault(const Fault& f, const std::string& path, int64_t step) {
  throw std::runtime_error(fmt::format("injected {} fault in {} at step {} during {}",
                                       Fault::Kind_Name(f.kind()), path, step, phase_name(f.phase())));
}

void check_fault(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase) {
  if (!plan || !plan->targets(path)) return;
  auto generic = [](const Fault& f) {
    return f.kind() == Fault::KILL || f.kind() == Fault::THROW || f.kind() == Fault::HANG;
  };
  if (auto f = plan->take(path, step, phase, generic)) {
    if (f->kind() == Fault::HANG) plan->hang(path, step, phase);
    raise_fault(*f, path, step);
  }
}

std::vector<Fault::Phase> fault_phases(const std::string& kind) {
  if (kind == "stage") return {Fault::FORWARD, Fault::BACKWARD, Fault::REDUCE};
  if (kind == "optim") return {Fault::REDUCE, Fault::OPTIMIZER};
  if (kind == "loader") return {Fault::FORWARD, Fault::BACKWARD};
  if (kind == "coordinator") return {Fault::FORWARD, Fault::REDUCE, Fault::OPTIMIZER, Fault::CHECKPOINT_WRITE};
  if (kind == "writer") return {Fault::OPTIMIZER, Fault::CHECKPOINT_WRITE};
  if (kind == "metrics") return {Fault::OPTIMIZER, Fault::CHECKPOINT_WRITE};
  return {};
}

void check_fault_plan(const Config& c, const std::vector<std::string>& actor_paths) {
  for (int i = 0; i < c.faults().fault_size(); ++i) {
    const auto& f = c.faults().fault(i);
    const auto where = fmt::format("faults.fault[{}]", i);
    if (std::find(actor_paths.begin(), actor_paths.end(), f.actor()) == actor_paths.end()) {
      std::string known;
      for (size_t k = 0; k < actor_paths.size() && k < 12; ++k) known += (k ? ", " : "") + actor_paths[k];
      if (actor_paths.size() > 12) known += ", ...";
      throw std::invalid_argument(fmt::format("{}: no actor '{}' in this layout (actors: {})", where, f.actor(), known));
    }
    const std::string kind = f.actor().substr(0, f.actor().find('/'));
    const auto phases = fault_phases(kind);
    if (std::find(phases.begin(), phases.end(), f.phase()) == phases.end()) {
      std::string ok;
      for (size_t k = 0; k < phases.size(); ++k) ok += (k ? ", " : "") + std::string(phase_name(phases[k]));
      throw std::invalid_argument(fmt::format("{}: a {} actor has no phase {} (it honours: {})", where, kind,
                                              phase_name(f.phase()), ok));
    }
    const bool data_fault = f.kind() == Fault::CORRUPT_SHARD || f.kind() == Fault::TRUNCATE_SHARD ||
                            f.kind() == Fault::FAIL_WRITE;
    if (data_fault && kind != "writer")
      throw std::invalid_argument(fmt::format("{}: {} applies to checkpoint writers only", where,
                                              Fault::Kind_Name(f.kind())));
    if (f.kind() == Fault::NAN_GRADIENT && (kind != "stage" || f.phase() != Fault::BACKWARD))
      throw std::invalid_argument(fmt::format("{}: NAN_GRADIENT applies to stages in phase backward", where));
  }
}

}  // namespace troupe::engine
