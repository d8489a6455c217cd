#include "comm/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

namespace troupe::comm {
namespace {

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
  kNotice = 0xAE,  // "I failed because ...", sent to every peer before closing
  kPoison = 0xAF,
};
constexpr uint32_t kGatherSub = 0xFFFFFF;  // all-gather phase of an all-reduce
constexpr uint32_t kMagic = 0x54525550;    // "TRUP"

uint64_t slot_of(Kind k, uint32_t seq, uint32_t sub) {
  return (uint64_t(k) << 56) | (uint64_t(seq) << 24) | uint64_t(sub & 0xFFFFFF);
}

enum class OpCode : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier };
const char* op_name(uint32_t op) {
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
    return fmt::format("{}(count={}, root={}, segment={}, reduction={}) as its collective #{}", op_name(op),
                       count, root, segment, reduction_name(GlooReduction(reduction)), seq);
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

std::chrono::milliseconds left(const OpCtx& op) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(op.deadline - Clock::now());
  return std::max(ms, 1ms);
}

// Gloo's rendezvous store on top of ours: keys live under one prefix, values read are
// remembered (they hold the peers' addresses, used to name a peer in Gloo's errors).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(comm::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + "/" + key, data);
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_.get(prefix_ + "/" + key, timeout_);
    seen_[key] = v;
    return v;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + "/" + k);
    store_.wait(full, timeout);
  }

  const std::vector<char>* seen(const std::string& key) const {
    auto it = seen_.find(key);
    return it == seen_.end() ? nullptr : &it->second;
  }
  const std::string& prefix() const { return prefix_; }

 private:
  comm::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::vector<char>> seen_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::string name, int rank, int size, GlooOptions options,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context, std::vector<std::string> peer_addresses)
      : name_(std::move(name)),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        segment_(std::max<size_t>(1, options_.segment_bytes / sizeof(float))),
        device_(std::move(device)),
        context_(std::move(context)),
        peer_addresses_(std::move(peer_addresses)),
        notices_(size_),
        notice_bufs_(size_) {
    // A standing receive per peer for its failure notice (at most one ever comes).
    for (int q = 0; q < size_ && context_; ++q) {
      if (q == rank_) continue;
      try {
        notice_bufs_[q] = context_->createUnboundBuffer(&notices_[q], sizeof(Notice));
        notice_bufs_[q]->recv(q, slot_of(kNotice, 0, 0), 0, sizeof(Notice));
      } catch (const std::exception&) {
        notice_bufs_[q].reset();  // a dead connection; the first operation will say so
      }
    }
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard lock(reap_mu_);
      stopping_ = true;
    }
    reap_cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
    notice_bufs_.clear();
    context_.reset();  // closes the connections (pairs) before the device stops its loop
    device_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  void all_reduce_sum(std::span<float> data) override {
    const OpCtx op = begin(fmt::format("all_reduce_sum of {} floats", data.size()));
    if (size_ == 1) return;
    const uint32_t seq = next_seq();
    exchange_descriptors({kMagic, uint32_t(OpCode::kAllReduce), seq, data.size(), -1, segment_,
                          uint32_t(options_.reduction)},
                         op);
    if (options_.reduction == GlooReduction::kRing) return gloo_ring(data, seq, op);
    const Chunk mine = chunk_range(data.size(), size_, rank_);
    reduce_scatter_rank_order(data.data(), data.size(), data.data() + mine.begin, seq, op);
    all_gather_direct(data.data() + mine.begin, data.data(), data.size(), seq, kGatherSub, op);
  }

  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    const OpCtx op = begin(fmt::format("reduce_scatter_sum of {} floats", in.size()));
    const Chunk mine = chunk_range(in.size(), size_, rank_);
    if (out.size() != mine.size())
      fail(fmt::format("{}: reduce_scatter_sum of {} elements gives rank {} a chunk of {}, but its output "
                       "holds {}",
                       name_, in.size(), rank_, mine.size(), out.size()));
    if (size_ == 1) {
      if (out.data() != in.data()) std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const uint32_t seq = next_seq();
    exchange_descriptors({kMagic, uint32_t(OpCode::kReduceScatter), seq, in.size(), -1, segment_, 0}, op);
    reduce_scatter_rank_order(in.data(), in.size(), out.data(), seq, op);
  }

  void all_gather(std::span<const float> in, std::span<float> out) override {
    const OpCtx op = begin(fmt::format("all_gather into {} floats", out.size()));
    const Chunk mine = chunk_range(out.size(), size_, rank_);
    if (in.size() != mine.size())
      fail(fmt::format("{}: all_gather into {} elements expects rank {}'s chunk of {}, got {}", name_,
                       out.size(), rank_, mine.size(), in.size()));
    if (size_ == 1) {
      if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const uint32_t seq = next_seq();
    exchange_descriptors({kMagic, uint32_t(OpCode::kAllGather), seq, out.size(), -1, 0, 0}, op);
    all_gather_direct(in.data(), out.data(), out.size(), seq, 0, op);
  }

  void broadcast(std::span<float> data, int root) override {
    const OpCtx op = begin(fmt::format("broadcast of {} floats from rank {}", data.size(), root));
    if (root < 0 || root >= size_)
      fail(fmt::format("{}: broadcast root {} outside 0..{}", name_, root, size_ - 1));
    if (size_ == 1) return;
    const uint32_t seq = next_seq();
    exchange_descriptors({kMagic, uint32_t(OpCode::kBroadcast), seq, data.size(), root, 0, 0}, op);
    if (data.empty()) return;
    const size_t bytes = data.size() * sizeof(float);
    std::vector<std::unique_ptr<Buffer>> bufs(size_);
    if (rank_ == root) {
      for (int q = 0; q < size_; ++q)
        if (q != rank_) {
          bufs[q] = make_buffer(data.data(), bytes, q, op);
          post(*bufs[q], true, q, slot_of(kData, seq, 0), 0, bytes, op);
        }
      for (int q = 0; q < size_; ++q)
        if (q != rank_) wait(*bufs[q], true, q, op);
    } else {
      bufs[root] = make_buffer(data.data(), bytes, root, op);
      post(*bufs[root], false, root, slot_of(kData, seq, 0), 0, bytes, op);
      wait(*bufs[root], false, root, op);
    }
  }

  // Every member sends its descriptor to every other and waits for all of theirs: once
  // that exchange completes, every member has entered the barrier.
  void barrier() override {
    const OpCtx op = begin("barrier");
    if (size_ == 1) return;
    exchange_descriptors({kMagic, uint32_t(OpCode::kBarrier), next_seq(), 0, -1, 0, 0}, op);
  }

  void send(std::span<const float> data, int peer, int tag) override {
    const OpCtx op = begin(fmt::format("send of {} floats with tag {} to rank {}", data.size(), tag, peer));
    check_peer(peer);
    auto ps = std::make_unique<PendingSend>();
    ps->op = op;
    ps->peer = peer;
    ps->header = {kMagic, tag, data.size()};
    ps->payload.assign(data.begin(), data.end());
    {
      // The header and the data of one message are posted back to back, so that the
      // receiver pairs them even when several threads send with one tag.
      std::lock_guard lock(send_mu_);
      ps->header_buf = make_buffer(&ps->header, sizeof(P2PHeader), peer, op);
      post(*ps->header_buf, true, peer, slot_of(kP2PHeader, uint32_t(tag), 0), 0, sizeof(P2PHeader), op);
      if (!ps->payload.empty()) {
        const size_t bytes = ps->payload.size() * sizeof(float);
        ps->data_buf = make_buffer(ps->payload.data(), bytes, peer, op);
        post(*ps->data_buf, true, peer, slot_of(kP2PData, uint32_t(tag), 0), 0, bytes, op);
      }
    }
    std::lock_guard lock(reap_mu_);
    if (!reaper_.joinable()) reaper_ = std::thread([this] { reap_sends(); });
    pending_.push_back(std::move(ps));
    reap_cv_.notify_all();
  }

  void recv(std::span<float> data, int peer, int tag) override {
    const OpCtx op = begin(fmt::format("recv of {} floats with tag {} from rank {}", data.size(), tag, peer));
    check_peer(peer);
    P2PHeader h;
    h.magic = 0;
    auto hb = make_buffer(&h, sizeof h, peer, op);
    post(*hb, false, peer, slot_of(kP2PHeader, uint32_t(tag), 0), 0, sizeof h, op);
    wait(*hb, false, peer, op);
    if (h.magic != kMagic || h.tag != tag)
      fail(fmt::format("{}: rank {}: {}: corrupt message header (magic {:#x}, tag {})", name_, rank_, op.what,
                       h.magic, h.tag));
    if (h.count != data.size()) {
      // Take the message off the connection so the next one with this tag lines up,
      // then report; the communicator stays usable (as the in-process one does).
      std::vector<float> scratch(h.count);
      if (!scratch.empty()) recv_payload(scratch, peer, tag, op);
      throw CommError(fmt::format("{}: rank {} expected {} floats with tag {} from rank {}, got {}", name_, rank_,
                                  data.size(), tag, peer, h.count));
    }
    if (!data.empty()) recv_payload(data, peer, tag, op);
  }

  void abort(const std::string& why) override {
    {
      std::lock_guard lock(mu_);
      if (abort_reason_.empty()) abort_reason_ = why;
      if (failed_.empty()) failed_ = "aborted: " + why;
    }
    poison();
  }

 private:
  struct PendingSend {
    OpCtx op;
    int peer = 0;
    P2PHeader header;
    std::vector<float> payload;
    std::unique_ptr<Buffer> header_buf, data_buf;
  };

  // Starts an operation: throws when the communicator failed or was aborted before.
  OpCtx begin(std::string what) {
    std::lock_guard lock(mu_);
    if (!abort_reason_.empty())
      throw CommError(fmt::format("{}: rank {}: {}: aborted: {}", name_, rank_, what, abort_reason_));
    if (!failed_.empty())
      throw CommError(fmt::format("{}: rank {}: {}: unusable after an earlier failure: {}", name_, rank_, what,
                                  failed_));
    return {std::move(what), Clock::now() + options_.timeout};
  }

  uint32_t next_seq() { return seq_++; }

  void check_peer(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw CommError(fmt::format("{}: rank {} cannot talk to peer {}", name_, rank_, peer));
  }

  // Records the first failure, makes the communicator unusable (closing its connections
  // so that every peer waiting on it fails too) and throws `why`.
  [[noreturn]] void fail(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (failed_.empty()) failed_ = why;
    }
    poison();
    throw CommError(why);
  }

  // A wait or a post on a connection to `peer` failed: say why, in the caller's terms.
  [[noreturn]] void failed_talking_to(int peer, const OpCtx& op, const std::string& detail) {
    std::string why;
    {
      std::lock_guard lock(mu_);
      if (!abort_reason_.empty())
        why = fmt::format("{}: rank {}: {}: aborted: {}", name_, rank_, op.what, abort_reason_);
      else if (poisoned_)
        why = fmt::format("{}: rank {}: {}: failed after an earlier failure: {}", name_, rank_, op.what, failed_);
    }
    const std::string who = peer >= 0 ? fmt::format("rank {}", peer) : std::string("a peer");
    if (!why.empty()) {
    } else if (detail.find("Timed out waiting") != std::string::npos || Clock::now() >= op.deadline) {
      why = fmt::format("{}: rank {}: {} timed out after {} ms waiting for {} (hung, stopped or too slow?)",
                        name_, rank_, op.what, options_.timeout.count(), who);
    } else if (detail.find("Application timeout") != std::string::npos) {
      why = fmt::format("{}: rank {}: {} failed: another operation of this communicator timed out", name_,
                        rank_, op.what);
    } else {
      why = fmt::format("{}: rank {}: {} lost {}: {}", name_, rank_, op.what, who, detail);
      // The peer may have closed because it failed first: say why, when it told us.
      bool first = false;
      {
        std::lock_guard lock(mu_);
        if ((first = failed_.empty())) failed_ = why;
      }
      poison();
      const std::string cause = notice_from(peer);
      if (!cause.empty()) {
        why += fmt::format(" (rank {} failed first: {})", peer, cause);
        std::lock_guard lock(mu_);
        if (first) failed_ = why;
      }
      throw CommError(why);
    }
    fail(why);
  }

  // The failure notice rank q sent before it closed its connections, or "". Only
  // called once this communicator is poisoned: a wait on a notice that never came
  // times out, and Gloo answers that by closing every connection.
  std::string notice_from(int q) {
    if (q < 0 || q >= size_ || !notice_bufs_[q]) return "";
    try {
      if (!notice_bufs_[q]->waitRecv(nullptr, 1ms)) return "";
    } catch (const std::exception&) {
      return "";
    }
    const Notice& n = notices_[q];
    if (n.magic != kMagic || n.length > sizeof n.text) return "";
    return std::string(n.text, n.length);
  }

  // Poisons the Gloo context: a 1 ms wait on a slot nobody sends to times out, and Gloo
  // answers a timed-out wait by failing every pending operation of the context and
  // closing all its connections. Local waiters wake now; peers see the connections drop.
  void poison() {
    {
      std::lock_guard lock(mu_);
      if (poisoned_) return;
      poisoned_ = true;
    }
    if (!context_) return;
    {
      // Tell every peer why, before the connections drop.
      Notice out;
      {
        std::lock_guard lock(mu_);
        out.magic = kMagic;
        out.length = uint32_t(std::min(failed_.size(), sizeof out.text));
        std::memcpy(out.text, failed_.data(), out.length);
      }
      std::vector<std::unique_ptr<Buffer>> sends;
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        try {
          auto b = context_->createUnboundBuffer(&out, sizeof out);
          b->send(q, slot_of(kNotice, 0, 0), 0, sizeof out);
          sends.push_back(std::move(b));
        } catch (const std::exception&) {
        }
      }
      const OpCtx notice{"", Clock::now() + 200ms};
      for (auto& b : sends) {
        try {
          b->waitSend(nullptr, left(notice));
        } catch (const std::exception&) {
          break;  // a timed-out wait poisoned the context already
        }
      }
    }
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      std::unique_ptr<Buffer> b;
      try {
        b = context_->createUnboundBuffer(&poison_byte_, 1);
        b->recv(q, slot_of(kPoison, 0, 0), 0, 1);
      } catch (const std::exception&) {
        continue;  // this connection is down already; try the next one
      }
      try {
        b->waitRecv(nullptr, 1ms);
      } catch (const std::exception&) {
      }
      break;
    }
  }

  std::unique_ptr<Buffer> make_buffer(void* p, size_t bytes, int peer, const OpCtx& op) {
    try {
      return context_->createUnboundBuffer(p, bytes);
    } catch (const std::exception& e) {
      failed_talking_to(peer, op, e.what());
    }
  }
  std::unique_ptr<Buffer> make_buffer(const void* p, size_t bytes, int peer, const OpCtx& op) {
    return make_buffer(const_cast<void*>(p), bytes, peer, op);  // only ever sent from
  }

  void post(Buffer& b, bool is_send, int peer, uint64_t slot, size_t offset, size_t bytes, const OpCtx& op) {
    try {
      if (is_send)
        b.send(peer, slot, offset, bytes);
      else
        b.recv(peer, slot, offset, bytes);
    } catch (const std::exception& e) {
      failed_talking_to(peer, op, e.what());
    }
  }

  void wait(Buffer& b, bool is_send, int peer, const OpCtx& op) {
    std::string detail = "aborted";
    try {
      if (is_send ? b.waitSend(nullptr, left(op)) : b.waitRecv(nullptr, left(op))) return;
    } catch (const std::exception& e) {
      detail = e.what();
    }
    failed_talking_to(peer, op, detail);
  }

  void recv_payload(std::span<float> data, int peer, int tag, const OpCtx& op) {
    auto db = make_buffer(data.data(), data.size() * sizeof(float), peer, op);
    post(*db, false, peer, slot_of(kP2PData, uint32_t(tag), 0), 0, data.size() * sizeof(float), op);
    wait(*db, false, peer, op);
  }

  // Sends `mine` to every other member, receives theirs, and fails on any difference.
  void exchange_descriptors(const Desc& mine, const OpCtx& op) {
    std::vector<Desc> theirs(size_);
    std::vector<std::unique_ptr<Buffer>> sends(size_), recvs(size_);
    const uint64_t slot = slot_of(kDesc, 0, 0);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      recvs[q] = make_buffer(&theirs[q], sizeof(Desc), q, op);
      post(*recvs[q], false, q, slot, 0, sizeof(Desc), op);
      sends[q] = make_buffer(&mine, sizeof(Desc), q, op);
      post(*sends[q], true, q, slot, 0, sizeof(Desc), op);
    }
    for (int q = 0; q < size_; ++q)
      if (q != rank_) wait(*recvs[q], false, q, op);
    for (int q = 0; q < size_; ++q)
      if (q != rank_) wait(*sends[q], true, q, op);
    for (int q = 0; q < size_; ++q)
      if (q != rank_ && !(theirs[q] == mine))
        fail(fmt::format("{}: rank {} called {} while rank {} called {}", name_, rank_, mine.str(), q,
                         theirs[q].magic == kMagic ? theirs[q].str() : std::string("something unreadable")));
  }

  // Rank r receives chunk r of every member and adds them in rank order 0..n-1 into
  // `out` (chunk r's length), exactly as the in-process communicator does. The chunk
  // arrives in segments; two are in flight while the previous one is summed. `out`
  // may be this rank's own chunk of `in`: that chunk is never sent, and each block is
  // read completely before it is written.
  void reduce_scatter_rank_order(const float* in, size_t n, float* out, uint32_t seq, const OpCtx& op) {
    const int others = size_ - 1;
    const Chunk mine = chunk_range(n, size_, rank_);
    const auto segments = [&](size_t len) { return (len + segment_ - 1) / segment_; };
    if (segments(n) >= kGatherSub)
      fail(fmt::format("{}: {} needs {} segments of {} bytes; raise segment_bytes", name_, op.what, segments(n),
                       options_.segment_bytes));

    // My contribution to every other member's chunk, one message per segment.
    struct Out {
      std::unique_ptr<Buffer> buf;
      int peer;
      size_t messages;
    };
    std::vector<Out> sends;
    for (int q = 0; q < size_; ++q) {
      const Chunk c = chunk_range(n, size_, q);
      if (q == rank_ || c.size() == 0) continue;
      Out o{make_buffer(in + c.begin, c.size() * sizeof(float), q, op), q, segments(c.size())};
      for (size_t s = 0; s < o.messages; ++s) {
        const size_t lo = s * segment_, len = std::min(segment_, c.size() - lo);
        post(*o.buf, true, q, slot_of(kData, seq, uint32_t(s)), lo * sizeof(float), len * sizeof(float), op);
      }
      sends.push_back(std::move(o));
    }

    // Staging for two segments from each other member: stage[(s % 2) * others + j].
    const size_t nseg = segments(mine.size());
    const size_t seg_len = std::min(segment_, mine.size());
    std::vector<float> stage(2 * size_t(others) * seg_len);
    std::vector<std::unique_ptr<Buffer>> recvs(2 * size_t(others));
    std::vector<int> peer_of(others);
    for (int q = 0, j = 0; q < size_; ++q)
      if (q != rank_) peer_of[j++] = q;
    const auto seg_size = [&](size_t s) { return std::min(segment_, mine.size() - s * segment_); };
    const auto post_recvs = [&](size_t s) {
      for (int j = 0; j < others; ++j) {
        auto& b = recvs[(s % 2) * others + j];
        if (!b) b = make_buffer(stage.data() + ((s % 2) * others + j) * seg_len, seg_len * sizeof(float),
                                peer_of[j], op);
        post(*b, false, peer_of[j], slot_of(kData, seq, uint32_t(s)), 0, seg_size(s) * sizeof(float), op);
      }
    };
    for (size_t s = 0; s < std::min<size_t>(2, nseg); ++s) post_recvs(s);

    constexpr size_t kBlock = 1024;
    float sum[kBlock];
    std::vector<const float*> term(size_);
    for (size_t s = 0; s < nseg; ++s) {
      for (int j = 0; j < others; ++j) wait(*recvs[(s % 2) * others + j], false, peer_of[j], op);
      const size_t lo = s * segment_, len = seg_size(s);
      for (int q = 0, j = 0; q < size_; ++q)
        term[q] = q == rank_ ? in + mine.begin + lo : stage.data() + ((s % 2) * others + j++) * seg_len;
      for (size_t b = 0; b < len; b += kBlock) {
        const size_t m = std::min(kBlock, len - b);
        std::copy(term[0] + b, term[0] + b + m, sum);
        for (int q = 1; q < size_; ++q) {
          const float* t = term[q] + b;
          for (size_t i = 0; i < m; ++i) sum[i] += t[i];
        }
        std::copy(sum, sum + m, out + lo + b);
      }
      if (s + 2 < nseg) post_recvs(s + 2);
    }
    for (auto& o : sends)
      for (size_t k = 0; k < o.messages; ++k) wait(*o.buf, true, o.peer, op);
  }

  // Every member sends its chunk to every other and receives theirs in place. `in`
  // may be this rank's own chunk of `out`.
  void all_gather_direct(const float* in, float* out, size_t n, uint32_t seq, uint32_t sub, const OpCtx& op) {
    const Chunk mine = chunk_range(n, size_, rank_);
    if (in != out + mine.begin) std::copy(in, in + mine.size(), out + mine.begin);
    std::vector<std::unique_ptr<Buffer>> sends(size_), recvs(size_);
    const uint64_t slot = slot_of(kData, seq, sub);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const Chunk c = chunk_range(n, size_, q);
      if (c.size() > 0) {
        recvs[q] = make_buffer(out + c.begin, c.size() * sizeof(float), q, op);
        post(*recvs[q], false, q, slot, 0, c.size() * sizeof(float), op);
      }
      if (mine.size() > 0) {
        sends[q] = make_buffer(out + mine.begin, mine.size() * sizeof(float), q, op);
        post(*sends[q], true, q, slot, 0, mine.size() * sizeof(float), op);
      }
    }
    for (int q = 0; q < size_; ++q)
      if (recvs[q]) wait(*recvs[q], false, q, op);
    for (int q = 0; q < size_; ++q)
      if (sends[q]) wait(*sends[q], true, q, op);
  }

  // Gloo's own ring allreduce (GlooReduction::kRing).
  void gloo_ring(std::span<float> data, uint32_t seq, const OpCtx& op) {
    if (data.empty()) return;
    try {
      gloo::AllreduceOptions o(context_);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTag(seq);
      o.setTimeout(left(op));
      gloo::allreduce(o);
    } catch (const std::exception& e) {
      failed_talking_to(peer_in(e.what()), op, e.what());
    }
  }

  // The rank whose address appears in a Gloo error message, or -1.
  int peer_in(const std::string& message) const {
    for (int q = 0; q < int(peer_addresses_.size()); ++q)
      if (!peer_addresses_[q].empty() && message.find(peer_addresses_[q]) != std::string::npos) return q;
    return -1;
  }

  // Waits for buffered sends in the order they were posted, each until its deadline.
  void reap_sends() {
    for (;;) {
      std::unique_ptr<PendingSend> ps;
      {
        std::unique_lock lock(reap_mu_);
        reap_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) return;
        ps = std::move(pending_.front());
        pending_.pop_front();
      }
      try {
        wait(*ps->header_buf, true, ps->peer, ps->op);
        if (ps->data_buf) wait(*ps->data_buf, true, ps->peer, ps->op);
      } catch (const CommError&) {
        // Recorded as the communicator's failure; the next call raises it.
      }
    }
  }

  const std::string name_;
  const int rank_, size_;
  const GlooOptions options_;
  const size_t segment_;  // elements
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::vector<std::string> peer_addresses_;  // as Gloo prints them, by rank
  std::vector<Notice> notices_;                     // failure notices from each peer
  std::vector<std::unique_ptr<Buffer>> notice_bufs_;
  uint32_t seq_ = 0;                                // collectives called so far
  char poison_byte_ = 0;

  std::mutex mu_;  // guards the three below
  std::string failed_;
  std::string abort_reason_;
  bool poisoned_ = false;

  std::mutex send_mu_;
  std::mutex reap_mu_;  // guards pending_ and stopping_
  std::condition_variable reap_cv_;
  std::deque<std::unique_ptr<PendingSend>> pending_;
  bool stopping_ = false;
  std::thread reaper_;
};

// Which ranks a store key of Gloo's rendezvous belongs to ("3" or "rank_3").
std::string ranks_of_keys(const std::vector<std::string>& keys, const std::string& prefix) {
  std::vector<std::string> ranks;
  for (const auto& k : keys) {
    std::string rest = k.rfind(prefix + "/", 0) == 0 ? k.substr(prefix.size() + 1) : k;
    if (rest.rfind("rank_", 0) == 0) rest = rest.substr(5);
    if (std::find(ranks.begin(), ranks.end(), rest) == ranks.end()) ranks.push_back(rest);
  }
  std::string out;
  for (const auto& r : ranks) out += (out.empty() ? "" : ", ") + r;
  return out;
}

// Gloo writes with writev(2), which raises SIGPIPE on a connection the peer closed;
// its default action would kill this process exactly when a peer dies. With the
// signal ignored, the write fails with EPIPE and becomes a CommError. A handler the
// application installed is left alone.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old_action {};
    if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL &&
        !(old_action.sa_flags & SA_SIGINFO))
      ::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

const char* reduction_name(GlooReduction r) {
  return r == GlooReduction::kRing ? "ring" : "rank-order";
}

GlooReduction parse_reduction(const std::string& text) {
  if (text == "rank-order") return GlooReduction::kRankOrder;
  if (text == "ring") return GlooReduction::kRing;
  throw std::invalid_argument("reduction '" + text + "': expected rank-order or ring");
}

std::shared_ptr<Communicator> connect_gloo(Store& store, const std::string& prefix, std::string name, int rank,
                                           int size, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError(fmt::format("{}: rank {} outside a group of {}", name, rank, size));
  if (options.timeout.count() <= 0)
    throw CommError(fmt::format("{}: timeout must be positive, got {} ms", name, options.timeout.count()));
  if (options.segment_bytes < sizeof(float))
    throw CommError(fmt::format("{}: segment_bytes must be at least {}, got {}", name, sizeof(float),
                                options.segment_bytes));
  if (size == 1) return std::make_shared<GlooCommunicator>(std::move(name), 0, 1, options, nullptr, nullptr,
                                                           std::vector<std::string>{});
  ignore_sigpipe();

  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{}: rank {}: cannot listen on host '{}': {}", name, rank, options.host, e.what()));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.timeout);
  StoreAdapter adapter(store, prefix + "/" + name, options.timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const StoreTimeout& e) {
    throw CommError(fmt::format("{}: rank {}: rendezvous under '{}' in {} timed out after {} ms: rank(s) {} "
                                "never arrived",
                                name, rank, adapter.prefix(), store.describe(), options.timeout.count(),
                                ranks_of_keys(e.missing(), adapter.prefix())));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{}: rank {}: connecting under '{}' in {} failed: {}", name, rank,
                                adapter.prefix(), store.describe(), e.what()));
  }

  // Each peer published the addresses of its pairs with every other rank, in rank
  // order without itself; ours is the one it listens on for us.
  std::vector<std::string> addresses(size);
  for (int q = 0; q < size; ++q) {
    const auto* all = q == rank ? nullptr : adapter.seen(std::to_string(q));
    if (!all || all->size() % size_t(size - 1) != 0) continue;
    const size_t each = all->size() / size_t(size - 1);
    const size_t index = size_t(rank < q ? rank : rank - 1);
    try {
      addresses[q] = gloo::transport::tcp::Address(
                         std::vector<char>(all->begin() + index * each, all->begin() + (index + 1) * each))
                         .str();
    } catch (const std::exception&) {
    }
  }
  auto comm = std::make_shared<GlooCommunicator>(name, rank, size, options, std::move(device), std::move(context),
                                                 std::move(addresses));
  // Gloo's connect returns on one member before its peers have finished theirs; a
  // member that left at once would break their connect. After this barrier every
  // member is connected, and every connection has carried data both ways.
  comm->barrier();
  return comm;
}

}  // namespace troupe::comm
