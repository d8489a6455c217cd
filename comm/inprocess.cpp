#include "comm/inprocess.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

namespace troupe::comm {
namespace {

// What one member asked for; all members of one collective must agree.
struct OpDesc {
  const char* op = "";
  size_t in = 0, out = 0;
  int root = -1;
  bool operator==(const OpDesc& o) const {
    return std::strcmp(op, o.op) == 0 && in == o.in && out == o.out && root == o.root;
  }
};

// State shared by the members of one group.
class Group {
 public:
  Group(int size, std::string name, std::chrono::milliseconds timeout)
      : size_(size), name_(std::move(name)), timeout_(timeout), in_(size), out_(size), desc_(size) {}

  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Phase 1 of a collective: publish this rank's buffers and wait for everyone.
  // Phase 2 (the caller's work on the others' buffers) happens between the two calls.
  void arrive(int rank, const OpDesc& d, const void* in, void* out) {
    std::unique_lock lock(mu_);
    in_[rank] = in;
    out_[rank] = out;
    desc_[rank] = d;
    wait_all(lock, rank, d.op);
    for (int q = 0; q < size_; ++q)
      if (!(desc_[q] == desc_[0]))
        fail_locked(fmt::format("{}: rank {} called {}(in={}, out={}, root={}) while rank 0 called "
                                "{}(in={}, out={}, root={})",
                                name_, q, desc_[q].op, desc_[q].in, desc_[q].out, desc_[q].root,
                                desc_[0].op, desc_[0].in, desc_[0].out, desc_[0].root));
  }
  // Phase 3: wait until every member is done with the others' buffers. Every member
  // passed arrive(), so every member is in phase 2 and will come here: wait for all of
  // them even when the group was aborted meanwhile. Leaving early would let a member's
  // owner free buffers a peer is still reading or writing (all_reduce_sum writes into
  // every member's output).
  void depart(int rank, const char* op) {
    std::unique_lock lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen; })) {
      const std::string why = fmt::format("{}: rank {} timed out after {} ms finishing {} ({} of {} members done)",
                                          name_, rank, timeout_.count(), op, arrived_, size_);
      if (aborted_.empty()) aborted_ = why;
      cv_.notify_all();
      throw CommError(why);
    }
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
  }

  const void* in(int q) const { return in_[q]; }
  void* out(int q) const { return out_[q]; }

  void abort(const std::string& why) {
    std::lock_guard lock(mu_);
    if (aborted_.empty()) aborted_ = why;
    cv_.notify_all();
  }

  void send(int src, int dst, int tag, std::span<const float> data) {
    std::lock_guard lock(mu_);
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
    mail_[{src, dst, tag}].emplace_back(data.begin(), data.end());
    cv_.notify_all();
  }
  void recv(int src, int dst, int tag, std::span<float> data) {
    std::unique_lock lock(mu_);
    auto key = std::make_tuple(src, dst, tag);
    const bool got = cv_.wait_for(lock, timeout_, [&] {
      return !aborted_.empty() || !mail_[key].empty();
    });
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
    if (!got)
      throw CommError(fmt::format("{}: rank {} timed out after {} ms waiting to recv tag {} from rank {}",
                                  name_, dst, timeout_.count(), tag, src));
    auto msg = std::move(mail_[key].front());
    mail_[key].pop_front();
    if (msg.size() != data.size())
      throw CommError(fmt::format("{}: rank {} expected {} floats with tag {} from rank {}, got {}",
                                  name_, dst, data.size(), tag, src, msg.size()));
    std::copy(msg.begin(), msg.end(), data.begin());
  }

 private:
  // A reusable barrier: the last member to arrive opens the next generation.
  void wait_all(std::unique_lock<std::mutex>& lock, int rank, const char* op) {
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool done = cv_.wait_for(lock, timeout_, [&] {
      return generation_ != gen || !aborted_.empty();
    });
    if (generation_ != gen) return;
    if (!aborted_.empty()) throw CommError(fmt::format("{}: aborted: {}", name_, aborted_));
    if (!done) {
      const std::string why = fmt::format("{}: rank {} timed out after {} ms in {} ({} of {} members arrived)",
                                          name_, rank, timeout_.count(), op, arrived_, size_);
      aborted_ = why;  // the group is unusable now: release everyone
      cv_.notify_all();
      throw CommError(why);
    }
  }
  [[noreturn]] void fail_locked(const std::string& why) {
    if (aborted_.empty()) aborted_ = why;
    cv_.notify_all();
    throw CommError(why);
  }

  const int size_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;
  std::vector<const void*> in_;
  std::vector<void*> out_;
  std::vector<OpDesc> desc_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<float>>> mail_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }
  const std::string& name() const override { return g_->name(); }

  void all_reduce_sum(std::span<float> data) override {
    const int n = size();
    g_->arrive(rank_, {"all_reduce_sum", data.size(), data.size(), -1}, nullptr, data.data());
    // Rank r owns elements [lo, hi): it reads them from every member, sums in rank
    // order, and writes the sum back to every member. Nobody else touches them.
    const size_t lo = data.size() * rank_ / n, hi = data.size() * (rank_ + 1) / n;
    for (size_t i = lo; i < hi; ++i) {
      float s = static_cast<float*>(g_->out(0))[i];
      for (int q = 1; q < n; ++q) s += static_cast<float*>(g_->out(q))[i];
      for (int q = 0; q < n; ++q) static_cast<float*>(g_->out(q))[i] = s;
    }
    g_->depart(rank_, "all_reduce_sum");
  }

  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    const int n = size();
    const Chunk mine = chunk_range(in.size(), n, rank_);
    if (out.size() != mine.size())
      throw CommError(fmt::format("{}: reduce_scatter_sum of {} elements gives rank {} a chunk of {}, "
                                  "but its output holds {}",
                                  name(), in.size(), rank_, mine.size(), out.size()));
    g_->arrive(rank_, {"reduce_scatter_sum", in.size(), 0, -1}, in.data(), out.data());
    // Blocks of the chunk are summed into a local buffer before they are stored, so
    // `out` may be this rank's own chunk of `in` (in place): every member's chunk r
    // is read before chunk r of anything is written, and only rank r touches it.
    constexpr size_t kBlock = 1024;
    float sum[kBlock];
    for (size_t lo = 0; lo < mine.size(); lo += kBlock) {
      const size_t len = std::min(kBlock, mine.size() - lo);
      const float* first = static_cast<const float*>(g_->in(0)) + mine.begin + lo;
      std::copy(first, first + len, sum);
      for (int q = 1; q < n; ++q) {
        const float* src = static_cast<const float*>(g_->in(q)) + mine.begin + lo;
        for (size_t i = 0; i < len; ++i) sum[i] += src[i];
      }
      std::copy(sum, sum + len, out.begin() + lo);
    }
    g_->depart(rank_, "reduce_scatter_sum");
  }

  void all_gather(std::span<const float> in, std::span<float> out) override {
    const int n = size();
    const Chunk mine = chunk_range(out.size(), n, rank_);
    if (in.size() != mine.size())
      throw CommError(fmt::format("{}: all_gather into {} elements expects rank {}'s chunk of {}, "
                                  "got {}",
                                  name(), out.size(), rank_, mine.size(), in.size()));
    g_->arrive(rank_, {"all_gather", 0, out.size(), -1}, in.data(), out.data());
    for (int q = 0; q < n; ++q) {
      const Chunk c = chunk_range(out.size(), n, q);
      const float* src = static_cast<const float*>(g_->in(q));
      // In place: rank q's input already is its own chunk of this output.
      if (src != out.data() + c.begin) std::copy(src, src + c.size(), out.begin() + c.begin);
    }
    g_->depart(rank_, "all_gather");
  }

  void broadcast(std::span<float> data, int root) override {
    if (root < 0 || root >= size())
      throw CommError(fmt::format("{}: broadcast root {} outside 0..{}", name(), root, size() - 1));
    g_->arrive(rank_, {"broadcast", data.size(), data.size(), root}, data.data(), data.data());
    if (rank_ != root) {
      const float* src = static_cast<const float*>(g_->in(root));
      std::copy(src, src + data.size(), data.begin());
    }
    g_->depart(rank_, "broadcast");
  }

  void barrier() override {
    g_->arrive(rank_, {"barrier", 0, 0, -1}, nullptr, nullptr);
    g_->depart(rank_, "barrier");
  }

  void send(std::span<const float> data, int peer, int tag) override {
    check_peer(peer);
    g_->send(rank_, peer, tag, data);
  }
  void recv(std::span<float> data, int peer, int tag) override {
    check_peer(peer);
    g_->recv(peer, rank_, tag, data);
  }

  void abort(const std::string& why) override { g_->abort(why); }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw CommError(fmt::format("{}: rank {} cannot talk to peer {}", name(), rank_, peer));
  }
  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_inprocess_group(int size, std::string name,
                                                                std::chrono::milliseconds timeout) {
  if (size < 1) throw CommError("a communicator group needs at least one member");
  auto g = std::make_shared<Group>(size, std::move(name), timeout);
  std::vector<std::shared_ptr<Communicator>> members;
  for (int r = 0; r < size; ++r) members.push_back(std::make_shared<InProcessCommunicator>(g, r));
  return members;
}

}  // namespace troupe::comm
