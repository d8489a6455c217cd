#include "kernels/memory_ledger.h"

namespace troupe::kernels {

namespace {
thread_local MemoryCategory t_category = MemoryCategory::kScratch;
}  // namespace

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kWeights: return "weights";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kScratch: return "scratch";
  }
  return "?";
}

int64_t& MemorySplit::at(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kWeights: return weights;
    case MemoryCategory::kGradients: return gradients;
    case MemoryCategory::kOptimizerState: return optimizer_state;
    case MemoryCategory::kActivations: return activations;
    case MemoryCategory::kScratch: break;
  }
  return scratch;
}

int64_t MemorySplit::at(MemoryCategory c) const { return const_cast<MemorySplit*>(this)->at(c); }

void MemoryLedger::add(const void* key, int64_t bytes, MemoryCategory c) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = blocks_.try_emplace(key, Entry{bytes, c});
  if (!fresh) {
    live_.at(it->second.category) -= it->second.bytes;
    it->second = Entry{bytes, c};
  }
  live_.at(c) += bytes;
  if (live_.total() > peak_.total()) peak_ = live_;
}

void MemoryLedger::remove(const void* key) {
  std::lock_guard lock(mu_);
  const auto it = blocks_.find(key);
  if (it == blocks_.end()) return;
  live_.at(it->second.category) -= it->second.bytes;
  blocks_.erase(it);
}

MemorySplit MemoryLedger::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

MemorySplit MemoryLedger::peak() const {
  std::lock_guard lock(mu_);
  return peak_;
}

int64_t MemoryLedger::blocks() const {
  std::lock_guard lock(mu_);
  return int64_t(blocks_.size());
}

void MemoryLedger::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = live_;
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : previous_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

}  // namespace troupe::kernels
