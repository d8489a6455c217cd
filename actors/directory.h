// Where actors under different supervisors find each other by path. Supervisors
// given a directory enter each child they start and remove it when it stops; an
// actor that must reach a peer which may have been restarted (the metrics actor, a
// checkpoint writer) looks it up at the moment it sends. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include <caf/all.hpp>

namespace troupe::actors {

class Directory {
 public:
  void put(const std::string& path, caf::actor a) {
    std::lock_guard lock(mu_);
    map_[path] = std::move(a);
  }
  // Removes `path` only while it still names `a` (a restarted child's successor stays).
  void erase(const std::string& path, const caf::actor_addr& a) {
    std::lock_guard lock(mu_);
    auto it = map_.find(path);
    if (it != map_.end() && it->second.address() == a) map_.erase(it);
  }
  // The actor at `path`, or an invalid handle.
  caf::actor get(const std::string& path) const {
    std::lock_guard lock(mu_);
    auto it = map_.find(path);
    return it == map_.end() ? caf::actor{} : it->second;
  }
  void clear() {
    std::lock_guard lock(mu_);
    map_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, caf::actor> map_;
};

}  // namespace troupe::actors
