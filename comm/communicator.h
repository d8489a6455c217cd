// A communicator: one member's handle on a group of ranks that run collectives
// together (a data-parallel group, a tensor-parallel group, the first and last
// pipeline stage sharing the tied embedding). Implementations: in-process (threads of
// one process, comm/inprocess.h), Gloo across processes (comm/gloo_communicator.h) and
// NCCL on GPUs (comm/nccl/).
//
// Every collective blocks the calling thread until the group has finished it, so it
// must only be called from a thread that may block (a detached actor or a worker),
// never from CAF's shared scheduler. Members must call the same collectives in the
// same order with the same sizes; a mismatch, a timeout or an abort raises CommError
// in every blocked member instead of hanging.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace troupe::comm {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Chunk r of n elements split across `parts` ranks: [n*r/parts, n*(r+1)/parts).
// Chunks differ in length by at most one element; every element is in exactly one.
struct Chunk {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
inline Chunk chunk_range(size_t n, int parts, int r) {
  return {n * size_t(r) / size_t(parts), n * size_t(r + 1) / size_t(parts)};
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in logs and errors, e.g. "dp[pp0/tp0]".
  virtual const std::string& name() const = 0;

  // data <- sum over ranks of data, in place. Every rank receives the identical
  // result: each element is summed in rank order 0, 1, ..., size-1.
  virtual void all_reduce_sum(std::span<float> data) = 0;

  // in holds n elements on every rank, cut into size() chunks by chunk_range(n, ...);
  // rank r receives out = sum over ranks q (in rank order) of q's chunk r, so
  // out.size() must be chunk r's length. `out` may be this rank's own chunk of `in`.
  virtual void reduce_scatter_sum(std::span<const float> in, std::span<float> out) = 0;

  // out holds n elements cut into size() chunks by chunk_range(n, ...); chunk q
  // becomes rank q's in (in.size() is this rank's chunk length). `in` may be this
  // rank's own chunk of `out` (in place).
  virtual void all_gather(std::span<const float> in, std::span<float> out) = 0;

  // data <- root's data on every rank.
  virtual void broadcast(std::span<float> data, int root) = 0;

  virtual void barrier() = 0;

  // Point to point: a send is matched by the peer's recv with the same tag and size.
  virtual void send(std::span<const float> data, int peer, int tag) = 0;
  virtual void recv(std::span<float> data, int peer, int tag) = 0;

  // Fails every collective now blocked or called later on any member with CommError
  // naming `why`. Used when a member is known dead, so the others do not wait for it.
  virtual void abort(const std::string& why) = 0;

  // ---- device memory (NCCL) ------------------------------------------------------
  // True when the spans are device memory of the GPU the communicator was made for
  // (comm/nccl). Only such a communicator has real issue forms below: each enqueues
  // the collective on the device after the work issued so far and makes the device's
  // later work wait for it, and returns at once (completion is seen through the
  // device's when_done). Elsewhere they are the blocking calls.
  virtual bool on_device() const { return false; }
  virtual void issue_all_reduce_sum(std::span<float> data) { all_reduce_sum(data); }
  virtual void issue_reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
    reduce_scatter_sum(in, out);
  }
  virtual void issue_all_gather(std::span<const float> in, std::span<float> out) { all_gather(in, out); }

  // Part [begin, end) of an in-place reduce-scatter of `all` (cut into chunks as
  // reduce_scatter_sum cuts it): the elements of that part in rank q's chunk receive
  // their sum over the group on rank q. Issuing the parts of a partition of `all` is the
  // whole in-place reduce-scatter, in pieces that can start as soon as each is final
  // (gradient buckets overlapping the backward). A device communicator enqueues the
  // part without making the device's later work wait for it: call
  // device_waits_for_issued() before that work touches the part. Elsewhere every rank
  // gets the part's sums (an all-reduce of the part: same values in its own chunk).
  virtual void issue_reduce_scatter_sum_part(std::span<float> all, size_t begin, size_t end) {
    all_reduce_sum(all.subspan(begin, end - begin));
  }
  // The device's work issued from now on waits for every collective issued so far
  // (device communicators; nothing to do elsewhere).
  virtual void device_waits_for_issued() {}

  // Point to point on device memory, matched in issue order between two members (no
  // tag travels: the caller's own message says what comes). issue_send enqueues the send
  // after the work issued so far and returns; the device's later work does not wait for
  // it, so `data` must stay unchanged until the peer is known to have received it (or
  // call device_waits_for_issued()). issue_recv enqueues the receive so that the
  // device's later work waits for it. Elsewhere they are the blocking calls.
  virtual void issue_send(std::span<const float> data, int peer, int tag) { send(data, peer, tag); }
  virtual void issue_recv(std::span<float> data, int peer, int tag) { recv(data, peer, tag); }
};

}  // namespace troupe::comm
