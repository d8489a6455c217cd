// What a Device's memory holds, by category: every block allocate() hands out is
// accounted to the category the allocating thread named (MemoryCategoryScope,
// Device::allocate_as; kScratch when it named none), and the device's own grow-once
// kernel scratch is accounted as kScratch when it grows. The ledger keeps the live
// bytes of each category and the split at the moment the total was highest since
// reset_peak(): a stage resets it when a step starts, so peak() is that step's peak.
// Thread-safe (a rank's stage and optimizer shard allocate from their own threads).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace troupe::kernels {

enum class MemoryCategory : uint8_t {
  kWeights,         // parameters
  kGradients,       // gradient accumulation
  kOptimizerState,  // Adam moments (and master weights where they are separate)
  kActivations,     // what forwards keep for their backwards: the activation slots
  kScratch,         // everything else: shared temporaries, hand-off buffers, kernel scratch, tables
};
constexpr int kMemoryCategories = 5;
const char* memory_category_name(MemoryCategory c);  // "weights", "gradients", ...

// Bytes per category; total() is their sum.
struct MemorySplit {
  int64_t weights = 0, gradients = 0, optimizer_state = 0, activations = 0, scratch = 0;
  int64_t& at(MemoryCategory c);
  int64_t at(MemoryCategory c) const;
  int64_t total() const { return weights + gradients + optimizer_state + activations + scratch; }
  // Spelled out: the .cu files that include device.h compile as C++17.
  bool operator==(const MemorySplit& o) const {
    return weights == o.weights && gradients == o.gradients && optimizer_state == o.optimizer_state &&
           activations == o.activations && scratch == o.scratch;
  }
};

class MemoryLedger {
 public:
  // Accounts `bytes` at `key` to `c`: a new block, or a block already accounted
  // whose size or category changed (the old entry is replaced).
  void add(const void* key, int64_t bytes, MemoryCategory c);
  // Forgets the block at `key` (nothing when it was never added).
  void remove(const void* key);

  MemorySplit live() const;
  // The split at the highest total since the last reset_peak() (or construction).
  MemorySplit peak() const;
  int64_t blocks() const;  // blocks accounted now
  // From now on the peak is measured afresh: peak() = live() until the total grows.
  void reset_peak();

 private:
  struct Entry {
    int64_t bytes;
    MemoryCategory category;
  };
  mutable std::mutex mu_;
  std::unordered_map<const void*, Entry> blocks_;
  MemorySplit live_, peak_;
};

// The category the allocations of this thread are accounted to while a scope lives
// (scopes nest; the previous category comes back when one ends).
MemoryCategory current_memory_category();
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

}  // namespace troupe::kernels
