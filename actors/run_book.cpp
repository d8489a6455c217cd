#include "actors/run_book.h"

#include <algorithm>
#include <utility>

namespace troupe::actors {

metrics::StepRecord RunBook::add_step(metrics::StepRecord r, std::vector<int64_t> samples,
                                      std::vector<msg::StageTiming> timings) {
  std::lock_guard lock(mu_);
  r.recomputed = r.step <= max_step_;
  if (r.recomputed) ++recomputed_;
  r.restarts = restarts_;
  max_step_ = std::max(max_step_, r.step);
  outcome_.steps.push_back(r);
  outcome_.step_samples.push_back(std::move(samples));
  outcome_.step_timings.push_back(std::move(timings));
  return r;
}

void RunBook::step_decided(int64_t step) {
  std::lock_guard lock(mu_);
  decided_step_ = std::max(decided_step_, step);
}

void RunBook::add_eval(const metrics::EvalRecord& e) {
  std::lock_guard lock(mu_);
  outcome_.evals.push_back(e);
}

void RunBook::failure(const metrics::FailureRecord& f, bool group_restart) {
  std::lock_guard lock(mu_);
  failures_.push_back(f);
  if (group_restart && !failed_at_) failed_at_ = Clock::now();
}

int64_t RunBook::resume_from(int64_t step) {
  std::lock_guard lock(mu_);
  // Keep the steps up to `step`; later ones belong to the abandoned timeline.
  max_step_ = std::max(max_step_, decided_step_);
  decided_step_ = 0;
  size_t keep = 0;
  while (keep < outcome_.steps.size() && outcome_.steps[keep].step <= step) ++keep;
  outcome_.steps.resize(keep);
  outcome_.step_samples.resize(keep);
  outcome_.step_timings.resize(keep);
  if (failed_at_) {
    ++restarts_;
    restarted_at_ = Clock::now();
    awaiting_first_step_ = true;
  }
  return restarts_;
}

void RunBook::group_ready() {
  std::lock_guard lock(mu_);
  if (awaiting_first_step_) ready_at_ = Clock::now();
}

void RunBook::fault_fired_at(Clock::time_point t) {
  std::lock_guard lock(mu_);
  fired_at_ = t;
}

std::optional<RunBook::Recovery> RunBook::first_step_done() {
  std::lock_guard lock(mu_);
  if (!awaiting_first_step_) return std::nullopt;
  awaiting_first_step_ = false;
  const auto now = Clock::now();
  const auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  Recovery r;
  if (fired_at_ && *fired_at_ <= *failed_at_) r.detection_s = secs(*fired_at_, *failed_at_);
  r.restart_s = secs(*failed_at_, *restarted_at_);
  const auto ready = ready_at_.value_or(*restarted_at_);
  r.reload_s = secs(*restarted_at_, ready);
  r.rewarm_s = secs(ready, now);
  recoveries_.push_back(r);
  failed_at_.reset();
  ready_at_.reset();
  fired_at_.reset();
  return r;
}

bool RunBook::recovering() const {
  std::lock_guard lock(mu_);
  return awaiting_first_step_;
}

int64_t RunBook::restarts() const {
  std::lock_guard lock(mu_);
  return restarts_;
}
double RunBook::elapsed_seconds() const {
  return std::chrono::duration<double>(Clock::now() - created_).count();
}
int64_t RunBook::recomputed_steps() const {
  std::lock_guard lock(mu_);
  return recomputed_;
}
int64_t RunBook::max_step_reached() const {
  std::lock_guard lock(mu_);
  return max_step_;
}
std::vector<metrics::FailureRecord> RunBook::failures() const {
  std::lock_guard lock(mu_);
  return failures_;
}
std::vector<RunBook::Recovery> RunBook::recoveries() const {
  std::lock_guard lock(mu_);
  return recoveries_;
}

RunOutcome RunBook::outcome() const {
  std::lock_guard lock(mu_);
  return outcome_;
}

void RunBook::rolled_back(const engine::RollbackRequest& r, const engine::RollbackDone& d) {
  std::lock_guard lock(mu_);
  rollbacks_.push_back({r, d});
  rollback_pending_ = true;
  outcome_.status = "rollback";
}

std::optional<RunBook::Rollback> RunBook::take_rollback() {
  std::lock_guard lock(mu_);
  if (!std::exchange(rollback_pending_, false)) return std::nullopt;
  outcome_.status.clear();
  return rollbacks_.back();
}

std::vector<RunBook::Rollback> RunBook::rollbacks() const {
  std::lock_guard lock(mu_);
  return rollbacks_;
}

void RunBook::earlier_rollbacks(std::vector<int64_t> spike_steps) {
  std::lock_guard lock(mu_);
  earlier_rollback_spikes_ = std::move(spike_steps);
}

std::vector<int64_t> RunBook::rollback_spikes() const {
  std::lock_guard lock(mu_);
  std::vector<int64_t> out = earlier_rollback_spikes_;
  for (const auto& r : rollbacks_) out.push_back(r.request.spike_step);
  return out;
}

void RunBook::finish(const std::string& status, const std::string& error, const metrics::RunSummary& summary) {
  std::lock_guard lock(mu_);
  outcome_.status = status;
  outcome_.error = error;
  outcome_.summary = summary;
}

}  // namespace troupe::actors
