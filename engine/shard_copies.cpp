#include "engine/shard_copies.h"

namespace troupe::engine {

void ShardCopies::keep(const std::string& file, Copy copy) {
  std::lock_guard lock(mu_);
  auto& slot = by_file_[file];
  if (slot.state && slot.step > copy.step) return;  // a late write of an older save
  slot = std::move(copy);
}

std::optional<ShardCopies::Copy> ShardCopies::find(int64_t step, const std::string& file) const {
  std::lock_guard lock(mu_);
  const auto it = by_file_.find(file);
  if (it == by_file_.end() || it->second.step != step) return std::nullopt;
  return it->second;
}

}  // namespace troupe::engine
