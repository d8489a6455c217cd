// Failures of the Gloo communicator: every Gloo call that can fail, the error it becomes,
// failure notices to the peers, poisoning, abort.
#include <algorithm>
#include <cstring>

#include "comm/gloo_detail.h"

namespace troupe::comm::detail {

void GlooCommunicator::abort(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (abort_reason_.empty()) abort_reason_ = why;
    if (failed_.empty()) failed_ = "aborted: " + why;
  }
  poison();
}

// Records the first failure, makes the communicator unusable (closing its connections
// so that every peer waiting on it fails too) and throws `why`.
void GlooCommunicator::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (failed_.empty()) failed_ = why;
  }
  poison();
  throw CommError(why);
}

// A wait or a post on a connection to `peer` failed: say why, in the caller's terms.
void GlooCommunicator::failed_talking_to(int peer, const OpCtx& op, const std::string& detail) {
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
    why = fmt::format("{}: rank {}: {} timed out after {} ms waiting for {} (hung, stopped or too slow?)", name_,
                      rank_, op.what, options_.timeout.count(), who);
  } else if (detail.find("Application timeout") != std::string::npos) {
    why = fmt::format("{}: rank {}: {} failed: another operation of this communicator timed out", name_, rank_,
                      op.what);
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
std::string GlooCommunicator::notice_from(int q) {
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
void GlooCommunicator::poison() {
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

std::unique_ptr<Buffer> GlooCommunicator::make_buffer(void* p, size_t bytes, int peer, const OpCtx& op) {
  try {
    return context_->createUnboundBuffer(p, bytes);
  } catch (const std::exception& e) {
    failed_talking_to(peer, op, e.what());
  }
}

std::unique_ptr<Buffer> GlooCommunicator::make_buffer(const void* p, size_t bytes, int peer, const OpCtx& op) {
  return make_buffer(const_cast<void*>(p), bytes, peer, op);  // only ever sent from
}

void GlooCommunicator::post(Buffer& b, bool is_send, int peer, uint64_t slot, size_t offset, size_t bytes,
                            const OpCtx& op) {
  try {
    if (is_send)
      b.send(peer, slot, offset, bytes);
    else
      b.recv(peer, slot, offset, bytes);
  } catch (const std::exception& e) {
    failed_talking_to(peer, op, e.what());
  }
}

void GlooCommunicator::wait(Buffer& b, bool is_send, int peer, const OpCtx& op) {
  std::string detail = "aborted";
  try {
    if (is_send ? b.waitSend(nullptr, left(op)) : b.waitRecv(nullptr, left(op))) return;
  } catch (const std::exception& e) {
    detail = e.what();
  }
  failed_talking_to(peer, op, detail);
}

// The rank whose address appears in a Gloo error message, or -1.
int GlooCommunicator::peer_in(const std::string& message) const {
  for (int q = 0; q < int(peer_addresses_.size()); ++q)
    if (!peer_addresses_[q].empty() && message.find(peer_addresses_[q]) != std::string::npos) return q;
  return -1;
}

}  // namespace troupe::comm::detail
