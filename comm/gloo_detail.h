// Internals of the Gloo communicator (comm/gloo_communicator.h), shared by its source
// files: gloo_communicator.cpp (connecting), gloo_collectives.cpp, gloo_p2p.cpp and
// gloo_failure.cpp (errors, abort, and every Gloo call that can fail). Not for other users.
//
// Protocol over Gloo's unbound buffers (one TCP connection per pair of members):
// - every collective starts with a descriptor exchange (Desc) among all members;
// - data of collective #seq travels on slots (kData, seq, segment);
// - a point-to-point message is a P2PHeader on (kP2PHeader, tag), then its floats on
//   (kP2PData, tag);
// - a member that fails sends each peer a Notice on kNotice, then closes everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo_communicator.h"

namespace troupe::comm::detail {

using Clock = std::chrono::steady_clock;
using Buffer = gloo::transport::UnboundBuffer;
using namespace std::chrono_literals;

// Slot of a message: kind (8 bits) | sequence number or tag (32 bits) | sub-slot (24
// bits). Gloo's own collectives use kinds 0x01..0x08 (gloo/types.h), so our messages
// never match its ring allreduce. Between two members, messages with one slot are
// matched in the order they were posted.
enum Kind : uint8_t {
  kDesc = 0xA1,
  kData = 0xA2,
  kP2PHeader = 0xA3,
  kP2PData = 0xA4,
  kProbe = 0xAC,   // never sent: a receive posted only to learn whether a connection is broken
  kWatch = 0xAD,   // never sent: standing 0-byte receives that fail when a connection breaks
  kNotice = 0xAE,  // "I failed because ...", sent to every peer before closing
  kPoison = 0xAF,
};
constexpr uint32_t kGatherSub = 0xFFFFFF;  // all-gather phase of an all-reduce
constexpr uint32_t kMagic = 0x54525550;    // "TRUP"

inline uint64_t slot_of(Kind k, uint32_t seq, uint32_t sub) {
  return (uint64_t(k) << 56) | (uint64_t(seq) << 24) | uint64_t(sub & 0xFFFFFF);
}

enum class OpCode : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier };
inline const char* op_name(uint32_t op) {
  switch (OpCode(op)) {
    case OpCode::kAllReduce: return "all_reduce_sum";
    case OpCode::kReduceScatter: return "reduce_scatter_sum";
    case OpCode::kAllGather: return "all_gather";
    case OpCode::kBroadcast: return "broadcast";
    case OpCode::kBarrier: return "barrier";
  }
  return "unknown operation";
}

// What a member called; every member of one collective must send the same descriptor.
struct Desc {
  uint32_t magic = kMagic;
  uint32_t op = 0;
  uint64_t seq = 0;        // collectives this member has called before
  uint64_t count = 0;      // elements of the whole buffer (n of chunk_range)
  int64_t root = -1;       // broadcast root
  uint64_t segment = 0;    // segment elements of the rank-order reduce-scatter
  uint32_t reduction = 0;  // GlooReduction of an all-reduce
  uint32_t pad = 0;
  bool operator==(const Desc&) const = default;
  std::string str() const {
    return fmt::format("{}(count={}, root={}, segment={}, reduction={}) as its collective #{}", op_name(op), count,
                       root, segment, reduction_name(GlooReduction(reduction)), seq);
  }
};

// Sent ahead of every point-to-point message, so that the receiver can check it
// before posting a receive of the right size.
struct P2PHeader {
  uint32_t magic = kMagic;
  int32_t tag = 0;
  uint64_t count = 0;
};

// What a member that fails tells its peers before it closes the connections, so that
// they can name the first cause instead of only "connection closed by rank q".
struct Notice {
  uint32_t magic = 0;
  uint32_t length = 0;
  char text[1016] = {};
};

// One operation in progress: what to call it in errors, and its deadline.
struct OpCtx {
  std::string what;
  Clock::time_point deadline;
};

inline std::chrono::milliseconds left(const OpCtx& op) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(op.deadline - Clock::now());
  return std::max(ms, 1ms);
}

class GlooCommunicator final : public Communicator {
 public:
  // context and device are null for a group of one member.
  GlooCommunicator(std::string name, int rank, int size, GlooOptions options,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  // gloo_collectives.cpp
  void all_reduce_sum(std::span<float> data) override;
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const float> in, std::span<float> out) override;
  void broadcast(std::span<float> data, int root) override;
  void barrier() override;

  // gloo_p2p.cpp
  void send(std::span<const float> data, int peer, int tag) override;
  void recv(std::span<float> data, int peer, int tag) override;

  // gloo_failure.cpp
  void abort(const std::string& why) override;

 private:
  struct PendingSend {
    OpCtx op;
    int peer = 0;
    P2PHeader header;
    std::vector<float> payload;
    std::unique_ptr<Buffer> header_buf, data_buf;
  };

  // gloo_communicator.cpp
  OpCtx begin(std::string what);  // throws when failed or aborted before
  uint32_t next_seq() { return seq_++; }
  void check_peer(int peer);

  // gloo_failure.cpp
  [[noreturn]] void fail(const std::string& why);
  std::pair<std::string, bool> record_failure(int peer, const OpCtx& op, const std::string& detail);
  std::string describe_loss(int peer, const std::string& what, const std::string& detail);
  std::string notice_from(int q);
  bool completed_anyway(Buffer& b, bool is_send);
  void poison();
  void watch_connections();
  std::unique_ptr<Buffer> make_buffer(void* p, size_t bytes, int peer, const OpCtx& op);
  std::unique_ptr<Buffer> make_buffer(const void* p, size_t bytes, int peer, const OpCtx& op);
  void post(Buffer& b, bool is_send, int peer, uint64_t slot, size_t offset, size_t bytes, const OpCtx& op);
  void wait(Buffer& b, bool is_send, int peer, const OpCtx& op);
  int broken_peer();

  // gloo_collectives.cpp
  void exchange_descriptors(const Desc& mine, const OpCtx& op);
  size_t segment_for_members() const;
  void reduce_scatter_rank_order(const float* in, size_t n, float* out, uint32_t seq, const OpCtx& op);
  void all_gather_direct(const float* in, float* out, size_t n, uint32_t seq, uint32_t sub, const OpCtx& op);
  void gloo_ring(std::span<float> data, uint32_t seq, const OpCtx& op);

  // gloo_p2p.cpp
  void recv_payload(std::span<float> data, int peer, int tag, const OpCtx& op);
  void reap_sends();

  const std::string name_;
  const int rank_, size_;
  const GlooOptions options_;
  const size_t segment_;  // elements (options.segment_bytes / 4)
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<Notice> notices_;                    // failure notices from each peer
  std::vector<std::unique_ptr<Buffer>> notice_bufs_;
  // The next descriptor from each peer: its receive is posted ahead, so that a peer's
  // descriptor goes out as soon as it is sent (Gloo sends data only to a posted receive).
  std::vector<Desc> next_desc_;
  std::vector<std::unique_ptr<Buffer>> desc_bufs_;
  uint32_t seq_ = 0;  // collectives called so far
  char poison_byte_ = 0;
  // One buffer with a 0-byte receive posted from every peer on kWatch. Nobody sends
  // there; when a connection breaks, Gloo fails that receive, which wakes the watchdog
  // thread: it fails the communicator at once, even when no operation was waiting on
  // that peer's data (Gloo never fails a send still queued on a broken connection).
  std::unique_ptr<Buffer> watch_;
  char watch_byte_ = 0;
  std::thread watchdog_;

  std::mutex mu_;  // guards the five below
  std::string failed_;
  std::string abort_reason_;
  bool poisoned_ = false;
  bool closing_ = false;                 // the destructor runs
  std::map<Buffer*, bool> waiting_;      // buffers a thread waits on now -> is_send

  std::mutex send_mu_;
  std::mutex reap_mu_;  // guards pending_ and stopping_
  std::condition_variable reap_cv_;
  std::deque<std::unique_ptr<PendingSend>> pending_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace troupe::comm::detail
