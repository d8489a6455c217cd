#include "engine/faults.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::engine {
namespace {

std::mutex g_process_mu;
std::function<void(const Fault&, const std::string&)> g_process_hook;

bool process_kind(Fault::Kind k) { return k == Fault::KILL_PROCESS || k == Fault::STOP_PROCESS; }

}  // namespace

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
  std::optional<Fault> hit;
  int32_t index = -1;
  std::function<void(int32_t, const Fault&)> hook;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < faults_.size() && !hit; ++i) {
      const auto& f = faults_[i];
      if (f.actor() == path && f.step() == step && f.phase() == phase && !fired_.count(i) &&
          (!also || also(f))) {
        fired_.insert(i);
        last_fired_ = std::chrono::steady_clock::now();
        hit = f;
        index = int32_t(i);
        hook = fire_hook_;
      }
    }
  }
  if (hit && hook) hook(index, *hit);
  return hit;
}

std::vector<int32_t> FaultPlan::fired_indices() const {
  std::lock_guard lock(mu_);
  return std::vector<int32_t>(fired_.begin(), fired_.end());
}

void FaultPlan::mark_fired(const std::vector<int32_t>& indices) {
  std::lock_guard lock(mu_);
  for (int32_t i : indices)
    if (i >= 0 && size_t(i) < faults_.size()) fired_.insert(size_t(i));
}

void FaultPlan::set_fire_hook(std::function<void(int32_t, const Fault&)> hook) {
  std::lock_guard lock(mu_);
  fire_hook_ = std::move(hook);
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

void set_process_fault_hook(std::function<void(const Fault&, const std::string&)> hook) {
  std::lock_guard lock(g_process_mu);
  g_process_hook = std::move(hook);
}

void raise_fault(const Fault& f, const std::string& path, int64_t step) {
  const auto what = fmt::format("injected {} fault in {} at step {} during {}", Fault::Kind_Name(f.kind()), path,
                                step, phase_name(f.phase()));
  if (process_kind(f.kind())) {
    std::function<void(const Fault&, const std::string&)> hook;
    {
      std::lock_guard lock(g_process_mu);
      hook = g_process_hook;
    }
    if (hook) hook(f, what);  // KILL_PROCESS does not return; STOP_PROCESS once continued
  }
  throw std::runtime_error(what);
}

namespace {

void sleep_for(const Fault& f, const std::string& path, int64_t step) {
  spdlog::warn("{}: injected delay of {:.3f} s at step {} during {}", path, f.delay_s(), step, phase_name(f.phase()));
  std::this_thread::sleep_for(std::chrono::duration<double>(f.delay_s()));
}

}  // namespace

void check_fault(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase) {
  if (!plan || !plan->targets(path)) return;
  auto generic = [](const Fault& f) {
    return f.kind() == Fault::KILL || f.kind() == Fault::THROW || f.kind() == Fault::HANG ||
           f.kind() == Fault::DELAY || process_kind(f.kind());
  };
  if (auto f = plan->take(path, step, phase, generic)) {
    if (f->kind() == Fault::DELAY) return sleep_for(*f, path, step);
    if (f->kind() == Fault::HANG) plan->hang(path, step, phase);
    raise_fault(*f, path, step);
  }
}

void check_delay(FaultPlan* plan, const std::string& path, int64_t step, Fault::Phase phase) {
  if (!plan || !plan->targets(path)) return;
  if (auto f = plan->take(path, step, phase, [](const Fault& f) { return f.kind() == Fault::DELAY; }))
    sleep_for(*f, path, step);
}

void inject_nan_gradient(FaultPlan* plan, const std::string& path, int64_t step, int32_t mb,
                         kernels::Device& device, float* grads) {
  if (!plan || !plan->targets(path)) return;
  auto this_mb = [mb](const Fault& f) { return f.kind() == Fault::NAN_GRADIENT && f.microbatch() == mb; };
  if (plan->take(path, step, Fault::BACKWARD, this_mb)) {
    spdlog::warn("{}: injected NaN gradient at step {} microbatch {}", path, step, mb);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    device.copy_from_host(grads, &nan, sizeof nan);
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
    if (f.kind() == Fault::REQUEST_STOP && kind != "coordinator")
      throw std::invalid_argument(fmt::format("{}: REQUEST_STOP applies to the coordinator only", where));
    if (f.kind() == Fault::NAN_GRADIENT && (kind != "stage" || f.phase() != Fault::BACKWARD))
      throw std::invalid_argument(fmt::format("{}: NAN_GRADIENT applies to stages in phase backward", where));
    if (process_kind(f.kind())) {
      if (c.cluster().workers() <= 0)
        throw std::invalid_argument(fmt::format("{}: {} acts on a worker process: it needs cluster mode "
                                                "(cluster.workers > 0)",
                                                where, Fault::Kind_Name(f.kind())));
      if (kind != "stage" && kind != "optim" && kind != "loader" && kind != "writer")
        throw std::invalid_argument(fmt::format(
            "{}: {} applies to actors that live on workers (stage, optim, loader, writer), not {}", where,
            Fault::Kind_Name(f.kind()), kind));
    }
  }
}

}  // namespace troupe::engine
