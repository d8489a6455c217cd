// The records bound for the metrics actor (startup, steps, evaluations, failures,
// events, the summary), held outside it so that none is lost while it restarts or
// after it hung and was replaced: a sender posts a record and wakes the metrics actor
// if one is registered; the metrics actor writes the records in the order they were
// posted and removes each only once it is written, so a record whose writing killed
// its predecessor is written by the successor. Only the metrics actor that claimed the
// inbox last may take records out: a predecessor that comes back from a hang writes
// nothing. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include "actors/directory.h"

namespace troupe::actors {

// metrics inbox -> metrics actor: records are waiting.
using drain_atom = caf::atom_constant<caf::atom("drain")>;

class MetricsInbox {
 public:
  void post(caf::message record) {
    std::lock_guard lock(mu_);
    records_.push_back(std::move(record));
  }
  // A new metrics actor takes over; returns its owner token.
  uint64_t claim() {
    std::lock_guard lock(mu_);
    return ++owner_;
  }
  // The oldest record not yet written, while `owner` holds the inbox.
  std::optional<caf::message> front(uint64_t owner) const {
    std::lock_guard lock(mu_);
    if (owner != owner_ || records_.empty()) return std::nullopt;
    return records_.front();
  }
  // The oldest record is written.
  void pop(uint64_t owner) {
    std::lock_guard lock(mu_);
    if (owner == owner_ && !records_.empty()) records_.pop_front();
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return records_.size();
  }
  // Why the oldest record cannot be written now ("" while records are written): a full
  // disk. Set and cleared by the metrics actor; the run's end reads it.
  void set_blocked(std::string why) {
    std::lock_guard lock(mu_);
    blocked_ = std::move(why);
  }
  std::string blocked() const {
    std::lock_guard lock(mu_);
    return blocked_;
  }

 private:
  mutable std::mutex mu_;
  std::deque<caf::message> records_;
  uint64_t owner_ = 0;
  std::string blocked_;
};

// Posts `record` and wakes the metrics actor registered under engine::metrics_path()
// in `directory` (none registered: its successor drains the inbox when it starts).
void post_metrics(MetricsInbox& inbox, const Directory& directory, caf::message record);

}  // namespace troupe::actors
