#include "config/origins.h"

namespace troupe::config {

void Origins::set(const std::string& field_path, std::string location) {
  at_[field_path] = std::move(location);
}

std::string Origins::where(const std::string& field_path) const {
  std::string p = field_path;
  while (!p.empty()) {
    if (auto it = at_.find(p); it != at_.end()) return it->second;
    const auto cut = p.find_last_of(".[");
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return source_;
}

}  // namespace troupe::config
