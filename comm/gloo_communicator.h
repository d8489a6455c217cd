// Gloo communicators: the members of a group are processes (or threads with their own
// Gloo contexts) connected by TCP, one connection per pair of members. Same interface
// and the same results as the in-process communicator (comm/inprocess.h):
//
// - Determinism. all_reduce_sum and reduce_scatter_sum default to rank order: rank r
//   receives chunk r (comm::chunk_range) of every member and adds them 0, 1, ..., n-1,
//   then all_gather hands the sums around. That is exactly the in-process order, so
//   both give bitwise identical results. Gloo's own ring allreduce (GlooReduction::kRing)
//   adds each segment around the ring starting at a segment-dependent rank: with 2
//   members that is still identical (a + b == b + a in IEEE arithmetic), with 3 or more
//   it can differ in the last bits from rank order (every member still gets the same
//   bits, and a run repeats itself).
// - Timeouts. Every collective and every point-to-point operation has a deadline
//   (GlooOptions::timeout from its start); a peer that is dead (its connection drops)
//   or hung (nothing arrives in time) raises CommError naming the group, this rank,
//   the operation and the peer.
// - Failure is final. After any error, or abort(), the communicator closes its
//   connections, so that every peer blocked on it fails at once too, and all later
//   calls raise CommError with the first error. Recover by building new communicators
//   under a fresh store prefix (a new generation).
// - Checked calls. Every collective first exchanges a small descriptor (operation,
//   element count, root, sequence number) with the other members; members that call
//   different collectives or sizes get a CommError naming both calls, instead of a
//   crash inside Gloo.
// - send() is buffered: it copies the data and returns; delivery completes in the
//   background (a failed delivery surfaces as CommError on the next call). recv()
//   checks the sender's tag and size. Messages between two members with one tag arrive
//   in the order they were sent.
//
// Signals: the first connect_gloo sets SIGPIPE to ignored when it has its default
// action (Gloo writes with writev, and a peer that died would otherwise kill this
// process with SIGPIPE instead of raising CommError).
//
// Threads: one thread at a time may run collectives on a communicator; send and recv
// may run on other threads at the same time (recv on one (peer, tag) from one thread at
// a time). abort() may be called from any thread. Destroying a communicator waits for
// its buffered sends to be delivered (bounded by the timeout); abort() first to drop them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/gloo_store.h"

namespace troupe::comm {

enum class GlooReduction {
  kRankOrder,  // direct reduce-scatter in rank order + all-gather (default, deterministic like in-process)
  kRing,       // Gloo's ring allreduce (all_reduce_sum only; reduce_scatter_sum stays rank order)
};
const char* reduction_name(GlooReduction r);
// "rank-order" or "ring"; throws std::invalid_argument naming the text otherwise.
GlooReduction parse_reduction(const std::string& text);

struct GlooOptions {
  // Address this member listens on and advertises to its peers (an IP or a host name).
  std::string host = "127.0.0.1";
  // Deadline of every operation, and of the rendezvous.
  std::chrono::milliseconds timeout{120000};
  GlooReduction reduction = GlooReduction::kRankOrder;
  // Rank-order reduce-scatter receives a chunk in segments of this size, two in flight,
  // so the sum of one overlaps the transfer of the next. Must agree across members.
  size_t segment_bytes = size_t(4) << 20;
};

// Joins group `name` as member `rank` of `size`: publishes this member's address in
// `store` under `prefix` + "/" + name, waits for the others and connects to each.
// Every member must pass the same prefix, name and size; the prefix must be fresh for
// each job and each rebuild. Throws CommError naming the group, the prefix and the
// ranks that never arrived when the rendezvous takes longer than options.timeout.
// Returns once every member is connected (it ends with a barrier).
std::shared_ptr<Communicator> connect_gloo(Store& store, const std::string& prefix, std::string name,
                                           int rank, int size, const GlooOptions& options = {});

}  // namespace troupe::comm
