#include "comm/ordered_reduction.h"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::comm {

OrderedReduction::OrderedReduction(int logical, int physical, size_t n, std::string name,
                                   std::chrono::milliseconds timeout)
    : logical_(logical),
      physical_(physical),
      n_(n),
      name_(std::move(name)),
      timeout_(timeout),
      accumulators_(size_t(std::max(physical, 0)), nullptr),
      params_(size_t(std::max(physical, 0)), nullptr),
      added_(size_t(std::max(logical, 0)), 0),
      contributed_(size_t(std::max(logical, 0)), 0),
      finished_(size_t(std::max(physical, 0)), 0),
      gathers_(size_t(std::max(logical, 0)), 0) {
  if (physical < 1 || logical < physical || logical % physical != 0)
    throw std::invalid_argument(fmt::format("{}: {} logical replicas cannot be hosted by {} physical ones", name_,
                                            logical, physical));
}

size_t OrderedReduction::accumulator_offset(int s) const {
  size_t at = 0;
  for (int t = owner(s); t < s; t += physical_) at += chunk_range(n_, logical_, t).size();
  return at;
}

size_t OrderedReduction::accumulator_size(int q) const {
  size_t size = 0;
  for (int s = q; s < logical_; s += physical_) size += chunk_range(n_, logical_, s).size();
  return size;
}

void OrderedReduction::attach(int q, float* accumulator, float* params) {
  std::lock_guard lock(mu_);
  accumulators_.at(size_t(q)) = accumulator;
  params_.at(size_t(q)) = params;
  cv_.notify_all();
}

template <class Ready>
void OrderedReduction::wait(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what) {
  const bool done = cv_.wait_for(lock, timeout_, [&] { return !aborted_.empty() || ready(); });
  if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
  if (!done) throw CommError(fmt::format("{}: timed out after {} ms waiting for {}", name_, timeout_.count(), what));
}

void OrderedReduction::contribute(int d, const float* grads) {
  std::unique_lock lock(mu_);
  const int64_t step = contributed_.at(size_t(d))++;
  const auto attached = [&] {
    return std::all_of(accumulators_.begin(), accumulators_.end(), [](float* a) { return a != nullptr; });
  };
  wait(lock, attached, "every physical replica's accumulator");
  for (int s = 0; s < logical_; ++s) {
    const int64_t turn = step * logical_ + d;
    wait(lock, [&] { return added_[size_t(s)] == turn; },
         fmt::format("logical replica {}'s part of shard {}", d - 1, s));
    const Chunk c = chunk_range(n_, logical_, s);
    float* sum = accumulators_[size_t(owner(s))] + accumulator_offset(s);
    lock.unlock();
    // Outside the lock: only this member touches shard s until it counts its addition.
    const float* g = grads + c.begin;
    if (d == 0)
      std::copy(g, g + c.size(), sum);
    else
      for (size_t i = 0; i < c.size(); ++i) sum[i] += g[i];
    lock.lock();
    ++added_[size_t(s)];
    cv_.notify_all();
  }
}

void OrderedReduction::finish(int q, float* grads) {
  std::unique_lock lock(mu_);
  const int64_t step = finished_.at(size_t(q))++;
  for (int s = q; s < logical_; s += physical_) {
    wait(lock, [&] { return added_[size_t(s)] == (step + 1) * logical_; },
         fmt::format("every logical replica's part of shard {}", s));
    const Chunk c = chunk_range(n_, logical_, s);
    const float* sum = accumulators_[size_t(q)] + accumulator_offset(s);
    std::copy(sum, sum + c.size(), grads + c.begin);
  }
}

void OrderedReduction::gather(int d) {
  std::unique_lock lock(mu_);
  const int64_t step = gathers_.at(size_t(d))++;
  ++gather_arrived_;
  cv_.notify_all();
  wait(lock, [&] { return gather_arrived_ >= (step + 1) * logical_; }, "every logical replica's updated shard");
  if (d >= physical_) return;  // the round-0 member copies for its physical replica
  float* mine = params_[size_t(d)];
  const std::vector<float*> params = params_;
  lock.unlock();
  // Every shard's owner has updated it (its members arrived after their updates) and
  // changes it again only after a whole next step, which needs this member.
  for (int s = 0; s < logical_; ++s) {
    if (owner(s) == d) continue;
    const Chunk c = chunk_range(n_, logical_, s);
    const float* from = params[size_t(owner(s))] + c.begin;
    std::copy(from, from + c.size(), mine + c.begin);
  }
}

void OrderedReduction::abort(const std::string& why) {
  std::lock_guard lock(mu_);
  if (aborted_.empty()) aborted_ = why.empty() ? std::string("aborted") : why;
  cv_.notify_all();
}

}  // namespace troupe::comm
