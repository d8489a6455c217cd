// The data-parallel reduction of one (pp, tp) group when physical replicas host several
// logical ones (parallel.physical_replicas < parallel.data, in one process;
// docs/layout.md).
//
// `logical` replicas d = 0 .. L-1 are computed by `physical` replicas q = 0 .. P-1:
// q hosts d = q, q + P, q + 2P, ... and computes them one after another, each into
// its one gradient buffer of n floats. The sums are those of the rank-order
// reduce-scatter over L members (comm/communicator.h) bit for bit: shard s (chunk s
// of n cut into L by chunk_range) ends as
//   ((g_0[s] + g_1[s]) + g_2[s]) + ... + g_{L-1}[s],
// added in that order whatever hosts which replica. Logical replica s owns shard s, so
// physical q owns shards q, q + P, ...: it keeps their running sums in an accumulator
// of about n / P floats (not one gradient buffer per hosted replica).
//
// Per step, in each physical replica, after logical replica d's gradient is complete:
//   contribute(d, grads)   adds g_d to every shard's sum, waiting, shard by shard, for
//                          d - 1's addition (replica 0 copies instead of adding);
//   finish(q, grads)       after q's last hosted replica contributed: waits until every
//                          shard q owns has all L additions and copies the sums into
//                          those shards of q's gradient buffer, where the optimizer
//                          shards of q's hosted replicas read them (as they read the
//                          in-place reduce-scatter);
// and after the optimizer shards have updated their ranges of q's parameters:
//   gather(d, params)      every logical member arrives; then each physical replica's
//                          round-0 member copies the shards other physical replicas own
//                          from their parameters into its own (an all-gather).
// The contribute of replica d waits only for d - 1, which is either earlier on its own
// physical replica or in the same round on another: nothing waits in a cycle.
//
// Like every collective here: a timeout or abort() raises CommError in every blocked
// member, naming the group and what it waited for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace troupe::comm {

class OrderedReduction {
 public:
  OrderedReduction(int logical, int physical, size_t n, std::string name, std::chrono::milliseconds timeout);

  int logical() const { return logical_; }
  int physical() const { return physical_; }
  const std::string& name() const { return name_; }
  // Physical replica q's accumulator length: the shards it owns, back to back.
  size_t accumulator_size(int q) const;
  // Hands over physical replica q's accumulator (accumulator_size(q) floats) and its
  // parameter buffer (n floats); both must outlive every call of the group.
  void attach(int q, float* accumulator, float* params);

  void contribute(int d, const float* grads);
  void finish(int q, float* grads);
  void gather(int d);

  void abort(const std::string& why);

 private:
  int owner(int s) const { return s % physical_; }
  // Where shard s starts in its owner's accumulator.
  size_t accumulator_offset(int s) const;
  // Waits on mu_ (held by `lock`) until `ready`; CommError on abort or timeout.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what);

  const int logical_, physical_;
  const size_t n_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string aborted_;
  std::vector<float*> accumulators_, params_;  // by physical replica
  std::vector<int64_t> added_;                 // by shard: additions so far, over all steps
  std::vector<int64_t> contributed_;           // by logical replica: steps contributed
  std::vector<int64_t> finished_;              // by physical replica: steps finished
  int64_t gather_arrived_ = 0;                 // over all steps: L a step
  std::vector<int64_t> gathers_;               // by logical replica: gathers entered
};

}  // namespace troupe::comm
