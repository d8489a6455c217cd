// The refusals of a cluster run, kept for its result and its log, within bounds.
//
// A stranger can open connections as fast as the kernel accepts them, each refused (at
// the handshake limit, a wrong secret, bytes that are not troupe's protocol). Neither
// the supervisor's memory nor its log may grow with that: the run keeps the first
// kKept refusals in full and counts the rest, and the gate logs the first kKept one
// line each and then one line per kLogEvery (test_cluster_strangers caught a
// replaying stranger's retry loop adding 30,000 entries, 10 MB, in a few seconds).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::actors {

// A refused connection or worker: who (its address; host and pid once it said hello)
// and why.
struct Refusal {
  std::string worker, reason;
};

class RefusalLog {
 public:
  static constexpr size_t kKept = 1024;
  static constexpr int64_t kLogEvery = 1000;

  // Thread-safe (the gate's thread and the registrar's both add).
  void add(const std::string& who, const std::string& why);
  std::vector<Refusal> kept() const;  // the first kKept, in order
  int64_t total() const;              // every refusal, kept or not

  // Whether the nth refusal (from 1) gets a log line of its own: the first kKept do,
  // then every kLogEvery-th (which says how many there were).
  static bool logs_line(int64_t nth) { return nth <= int64_t(kKept) || nth % kLogEvery == 0; }

 private:
  mutable std::mutex mu_;
  std::vector<Refusal> kept_;
  int64_t total_ = 0;
};

}  // namespace troupe::actors
