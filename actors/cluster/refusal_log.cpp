#include "actors/cluster/refusal_log.h"

namespace troupe::actors {

void RefusalLog::add(const std::string& who, const std::string& why) {
  std::lock_guard lock(mu_);
  ++total_;
  if (kept_.size() < kKept) kept_.push_back({who, why});
}

std::vector<Refusal> RefusalLog::kept() const {
  std::lock_guard lock(mu_);
  return kept_;
}

int64_t RefusalLog::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace troupe::actors
