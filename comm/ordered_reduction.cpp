#include "comm/ordered_reduction.h"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::comm {

OrderedReduction::OrderedReduction(std::shared_ptr<Communicator> group, int logical, size_t n,
                                   std::chrono::milliseconds timeout)
    : group_(std::move(group)),
      logical_(logical),
      physical_(group_->size()),
      member_(group_->rank()),
      n_(n),
      timeout_(timeout) {
  if (logical < physical_ || logical % physical_ != 0)
    throw std::invalid_argument(fmt::format("{}: {} logical replicas cannot be hosted by {} physical ones",
                                            group_->name(), logical, physical_));
  staging_.resize(chunk_range(n_, logical_, logical_ - 1).size() + 1);
}

size_t OrderedReduction::accumulator_offset(int s) const {
  size_t at = 0;
  for (int t = owner(s); t < s; t += physical_) at += chunk_range(n_, logical_, t).size();
  return at;
}

size_t OrderedReduction::accumulator_size() const {
  size_t size = 0;
  for (int s = member_; s < logical_; s += physical_) size += chunk_range(n_, logical_, s).size();
  return size;
}

void OrderedReduction::attach(float* accumulator, float* params) {
  accumulator_ = accumulator;
  params_ = params;
}

void OrderedReduction::contribute(int d, const float* grads) {
  if (d % physical_ != member_ || d < 0 || d >= logical_)
    throw std::logic_error(fmt::format("{}: logical replica {} is not hosted by member {} of {}", group_->name(), d,
                                       member_, physical_));
  const int turn = d / physical_;
  for (int s = 0; s < logical_; ++s) {
    if (owner(s) == member_) continue;
    const Chunk c = chunk_range(n_, logical_, s);
    group_->send({grads + c.begin, c.size()}, owner(s), tag(s));
  }
  for (int s = member_; s < logical_; s += physical_) {
    const Chunk c = chunk_range(n_, logical_, s);
    float* sum = accumulator_ + accumulator_offset(s);
    // The turn's contributions in member order: logical replicas jP, jP + 1, ...
    for (int m = 0; m < physical_; ++m) {
      const float* g = grads + c.begin;
      if (m != member_) {
        group_->recv({staging_.data(), c.size()}, m, tag(s));
        g = staging_.data();
      }
      if (turn == 0 && m == 0)
        std::copy(g, g + c.size(), sum);
      else
        for (size_t i = 0; i < c.size(); ++i) sum[i] += g[i];
    }
  }
}

void OrderedReduction::finish(float* grads) {
  for (int s = member_; s < logical_; s += physical_) {
    const Chunk c = chunk_range(n_, logical_, s);
    const float* sum = accumulator_ + accumulator_offset(s);
    std::copy(sum, sum + c.size(), grads + c.begin);
  }
}

void OrderedReduction::gather(int d) {
  std::unique_lock lock(mu_);
  if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", group_->name(), aborted_));
  const int64_t gen = gathered_;
  const int hosted = logical_ / physical_;
  if (++arrived_ < hosted) {
    // The last hosted replica to arrive gathers for all of them.
    const bool done = cv_.wait_for(lock, timeout_, [&] { return gathered_ > gen || !aborted_.empty(); });
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", group_->name(), aborted_));
    if (!done)
      throw CommError(fmt::format("{}: logical replica {} timed out after {} ms waiting for its physical replica's "
                                  "other hosted replicas' updates",
                                  group_->name(), d, timeout_.count()));
    return;
  }
  arrived_ = 0;
  lock.unlock();
  if (physical_ > 1) {
    for (int s = member_; s < logical_; s += physical_) {
      const Chunk c = chunk_range(n_, logical_, s);
      for (int m = 0; m < physical_; ++m)
        if (m != member_) group_->send({params_ + c.begin, c.size()}, m, tag(s));
    }
    for (int s = 0; s < logical_; ++s) {
      if (owner(s) == member_) continue;
      const Chunk c = chunk_range(n_, logical_, s);
      group_->recv({params_ + c.begin, c.size()}, owner(s), tag(s));
    }
  }
  lock.lock();
  ++gathered_;
  cv_.notify_all();
}

void OrderedReduction::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (aborted_.empty()) aborted_ = why.empty() ? std::string("aborted") : why;
    cv_.notify_all();
  }
  group_->abort(why);
}

}  // namespace troupe::comm
