// The data-parallel reduction of one (pp, tp) group when physical replicas host several
// logical ones (parallel.physical_replicas < parallel.data; docs/layout.md): one
// physical replica's part, over the group's communicator of the P physical replicas
// (in-process, or Gloo across worker processes).
//
// `logical` replicas d = 0 .. L-1 are computed by `physical` replicas q = 0 .. P-1:
// q hosts d = q, q + P, q + 2P, ... and computes them one after another (turn j is
// d = jP + q), each into its one gradient buffer of n floats. The sums are those of
// the rank-order reduce-scatter over L members (comm/communicator.h) bit for bit:
// shard s (chunk s of n cut into L by chunk_range) ends as
//   ((g_0[s] + g_1[s]) + g_2[s]) + ... + g_{L-1}[s].
// Logical replica s owns shard s, so physical q owns shards q, q + P, ...: it keeps
// their running sums in an accumulator of about n / P floats (not one gradient buffer
// per hosted replica).
//
// Per step, on physical replica q:
//   contribute(d, grads)  after hosted replica d's gradient is complete (turns in
//                         order): sends its chunk of every shard another member owns to
//                         that owner, then adds, for each shard q owns, the turn's P
//                         contributions in member order m = 0 .. P-1 (logical jP + m:
//                         the sum's order), receiving the others' (replica 0 copies);
//   finish(grads)         after q's last turn: the sums of q's shards into those shards
//                         of q's gradient buffer, where the optimizer shards of its
//                         hosted replicas read their ranges (as they read the in-place
//                         reduce-scatter);
//   gather(d)             after each hosted replica's optimizer shard updated its range
//                         of q's parameters: the last of q's hosted replicas to arrive
//                         sends q's shards to every other member and receives theirs
//                         (an all-gather); every hosted replica returns once that is
//                         done, so no turn of the next step reads half-gathered weights.
// Sends are buffered (comm/communicator.h's send: delivered in the background), so every
// member sends before it receives and nothing waits in a cycle. Messages of one shard
// travel with one tag and arrive in send order, so turn j's arrive after turn j - 1's.
// A failure, timeout or abort of the communicator raises CommError; abort() also wakes
// a hosted replica waiting here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace troupe::comm {

class OrderedReduction {
 public:
  // `group`: the P physical replicas of this (pp, tp); this member is group->rank().
  OrderedReduction(std::shared_ptr<Communicator> group, int logical, size_t n, std::chrono::milliseconds timeout);

  int logical() const { return logical_; }
  int physical() const { return physical_; }
  int member() const { return member_; }
  // This member's accumulator length: the shards it owns, back to back.
  size_t accumulator_size() const;
  // Its accumulator (accumulator_size() floats) and parameter buffer (n floats); both
  // must outlive every call.
  void attach(float* accumulator, float* params);

  void contribute(int d, const float* grads);
  void finish(float* grads);
  void gather(int d);

  void abort(const std::string& why);

 private:
  int owner(int s) const { return s % physical_; }
  size_t accumulator_offset(int s) const;  // where owned shard s starts in the accumulator
  int tag(int s) const { return kTagBase + s; }

  static constexpr int kTagBase = 1 << 20;  // clear of the pipeline's tags on a shared group
  const std::shared_ptr<Communicator> group_;
  const int logical_, physical_, member_;
  const size_t n_;
  const std::chrono::milliseconds timeout_;
  float* accumulator_ = nullptr;
  float* params_ = nullptr;
  std::vector<float> staging_;  // one shard from another member

  // gather(): hosted replicas arrived for the next gather, gathers done, and the reason
  // an abort gave.
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t gathered_ = 0;
  std::string aborted_;
};

}  // namespace troupe::comm
