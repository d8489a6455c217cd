// Connecting a Gloo communicator: rendezvous through a Store, the per-member state,
// and the checks every operation starts with. The operations themselves live in
// gloo_collectives.cpp, gloo_p2p.cpp and gloo_failure.cpp (see gloo_detail.h).
#include "comm/gloo_communicator.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo_detail.h"
#include "util/sigpipe.h"

namespace troupe::comm {
namespace detail {
namespace {

// Gloo's rendezvous store on top of ours: keys live under one prefix.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(comm::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + "/" + key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + "/" + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + "/" + k);
    store_.wait(full, timeout);
  }

  const std::string& prefix() const { return prefix_; }

 private:
  comm::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

GlooCommunicator::GlooCommunicator(std::string name, int rank, int size, GlooOptions options,
                                   std::shared_ptr<gloo::transport::Device> device,
                                   std::shared_ptr<gloo::rendezvous::Context> context)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      segment_(std::max<size_t>(1, options_.segment_bytes / sizeof(float))),
      device_(std::move(device)),
      context_(std::move(context)),
      notices_(size_),
      notice_bufs_(size_),
      next_desc_(size_),
      desc_bufs_(size_) {
  // A standing receive per peer for its failure notice (at most one ever comes), and
  // the receive of its first descriptor.
  for (int q = 0; q < size_ && context_; ++q) {
    if (q == rank_) continue;
    try {
      notice_bufs_[q] = context_->createUnboundBuffer(&notices_[q], sizeof(Notice));
      notice_bufs_[q]->recv(q, slot_of(kNotice, 0, 0), 0, sizeof(Notice));
      desc_bufs_[q] = context_->createUnboundBuffer(&next_desc_[q], sizeof(Desc));
      desc_bufs_[q]->recv(q, slot_of(kDesc, 0, 0), 0, sizeof(Desc));
    } catch (const std::exception&) {
      notice_bufs_[q].reset();  // a dead connection; the first operation will say so
      desc_bufs_[q].reset();
    }
  }
  if (context_ && size_ > 1) {
    watch_ = context_->createUnboundBuffer(&watch_byte_, 1);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      try {
        watch_->recv(q, slot_of(kWatch, 0, 0), 0, 0);
      } catch (const std::exception&) {
        // a dead connection; the watchdog wakes at once
      }
    }
    watchdog_ = std::thread([this] { watch_connections(); });
  }
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard lock(reap_mu_);
    stopping_ = true;
  }
  reap_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  if (watch_) watch_->abortWaitRecv();
  if (watchdog_.joinable()) watchdog_.join();
  notice_bufs_.clear();
  desc_bufs_.clear();
  watch_.reset();
  context_.reset();  // closes the connections (pairs) before the device stops its loop
  device_.reset();
}

// Starts an operation: throws when the communicator failed or was aborted before.
OpCtx GlooCommunicator::begin(std::string what) {
  std::lock_guard lock(mu_);
  if (!abort_reason_.empty())
    throw CommError(fmt::format("{}: rank {}: {}: aborted: {}", name_, rank_, what, abort_reason_));
  if (!failed_.empty())
    throw CommError(
        fmt::format("{}: rank {}: {}: unusable after an earlier failure: {}", name_, rank_, what, failed_));
  return {std::move(what), Clock::now() + options_.timeout};
}

void GlooCommunicator::check_peer(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw CommError(fmt::format("{}: rank {} cannot talk to peer {}", name_, rank_, peer));
}

namespace {

// The ranks of a rendezvous whose addresses are not in the store (yet): Gloo waits for
// its peers one by one, so its timeout names only the first one missing.
std::string missing_ranks(comm::Store& store, const std::string& prefix, int size, int rank) {
  std::string out;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    try {
      store.wait({prefix + "/" + std::to_string(q)}, 1ms);
    } catch (const CommError&) {
      out += (out.empty() ? "" : ", ") + std::to_string(q);
    }
  }
  return out;
}

}  // namespace
}  // namespace detail

const char* reduction_name(GlooReduction r) { return r == GlooReduction::kRing ? "ring" : "rank-order"; }

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
    throw CommError(
        fmt::format("{}: segment_bytes must be at least {}, got {}", name, sizeof(float), options.segment_bytes));
  if (size == 1)
    return std::make_shared<detail::GlooCommunicator>(std::move(name), 0, 1, options, nullptr, nullptr);
  util::ignore_sigpipe();

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
  detail::StoreAdapter adapter(store, prefix + "/" + name, options.timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const StoreTimeout&) {
    throw CommError(
        fmt::format("{}: rank {}: rendezvous under '{}' in {} timed out after {} ms: rank(s) {} "
                    "never arrived",
                    name, rank, adapter.prefix(), store.describe(), options.timeout.count(),
                    detail::missing_ranks(store, adapter.prefix(), size, rank)));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{}: rank {}: connecting under '{}' in {} failed: {}", name, rank, adapter.prefix(),
                                store.describe(), e.what()));
  }

  auto comm = std::make_shared<detail::GlooCommunicator>(name, rank, size, options, std::move(device),
                                                         std::move(context));
  // Gloo's connect returns on one member before its peers have finished theirs; a
  // member that left at once would break their connect. After this barrier every
  // member is connected, and every connection has carried data both ways.
  comm->barrier();
  return comm;
}

}  // namespace troupe::comm
