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

// A wait or a post on a connection to `peer` failed: says why in the caller's terms,
// records it as the communicator's failure (the first one counts) and poisons.
// Returns the message and whether abort() caused it.
std::pair<std::string, bool> GlooCommunicator::record_failure(int peer, const OpCtx& op,
                                                              const std::string& detail) {
  std::string why;
  bool aborted = false;
  {
    std::lock_guard lock(mu_);
    aborted = !abort_reason_.empty();
    if (aborted)
      why = fmt::format("{}: rank {}: {}: aborted: {}", name_, rank_, op.what, abort_reason_);
    else if (poisoned_)
      why = fmt::format("{}: rank {}: {}: failed after an earlier failure: {}", name_, rank_, op.what, failed_);
  }
  if (!why.empty()) {
  } else if (detail.find("Timed out waiting") != std::string::npos || Clock::now() >= op.deadline) {
    why = fmt::format("{}: rank {}: {} timed out after {} ms waiting for {} (hung, stopped or too slow?)", name_,
                      rank_, op.what, options_.timeout.count(),
                      peer >= 0 ? fmt::format("rank {}", peer) : std::string("a peer"));
  } else if (detail.find("Application timeout") != std::string::npos) {
    why = fmt::format("{}: rank {}: {} failed: another operation of this communicator timed out", name_, rank_,
                      op.what);
  } else {
    why = describe_loss(peer, op.what, detail);
  }
  {
    std::lock_guard lock(mu_);
    if (failed_.empty()) failed_ = why;
  }
  poison();
  return {why, aborted};
}

// "{name}: rank r: {what} lost rank q: {detail}", with the notice rank q sent, if any,
// saying why it failed first. Only for a connection to q that broke: then the notice
// receive has completed or failed already, and notice_from does not block.
std::string GlooCommunicator::describe_loss(int peer, const std::string& what, const std::string& detail) {
  std::string why = fmt::format("{}: rank {}: {}lost {}: {}", name_, rank_, what.empty() ? "" : what + " ",
                                peer >= 0 ? fmt::format("rank {}", peer) : std::string("a peer"), detail);
  const std::string cause = notice_from(peer);
  if (!cause.empty()) why += fmt::format(" (rank {} failed first: {})", peer, cause);
  return why;
}

// The failure notice rank q sent before it closed its connections, or "".
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

// Whether a wait that failed (or was released by poison) had its completion all the
// same. Called once the communicator is poisoned, so a wait that times out costs
// nothing more. The first call may only consume poison's release.
bool GlooCommunicator::completed_anyway(Buffer& b, bool is_send) {
  for (int k = 0; k < 2; ++k) {
    try {
      if (is_send ? b.waitSend(nullptr, 1ms) : b.waitRecv(nullptr, 1ms)) return true;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

// Waits for a connection of this communicator to break (see watch_ in gloo_detail.h)
// and fails the communicator when one does, naming the peer.
void GlooCommunicator::watch_connections() {
  std::string detail;
  try {
    if (!watch_->waitRecv(nullptr, std::chrono::hours(24 * 365))) return;  // released by the destructor
    detail = "a message on the watch slot";
  } catch (const std::exception& e) {
    detail = e.what();
  }
  {
    std::lock_guard lock(mu_);
    if (poisoned_ || closing_) return;  // our own failure (it reports itself) or shutdown
  }
  if (detail.find("Application timeout") != std::string::npos) return;  // an operation timed out; it reports
  const std::string why = describe_loss(broken_peer(), "", detail);
  {
    std::lock_guard lock(mu_);
    if (failed_.empty()) failed_ = why;
  }
  poison();
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
  // Gloo does not fail a send still queued on a connection that broke: release every
  // wait in progress (later waits see poisoned_ and do not block).
  std::lock_guard lock(mu_);
  for (const auto& [buf, is_send] : waiting_) is_send ? buf->abortWaitSend() : buf->abortWaitRecv();
}

std::unique_ptr<Buffer> GlooCommunicator::make_buffer(void* p, size_t bytes, int peer, const OpCtx& op) {
  try {
    return context_->createUnboundBuffer(p, bytes);
  } catch (const std::exception& e) {
    throw CommError(record_failure(peer, op, e.what()).first);
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
    throw CommError(record_failure(peer, op, e.what()).first);
  }
}

void GlooCommunicator::wait(Buffer& b, bool is_send, int peer, const OpCtx& op) {
  bool poisoned = false;
  {
    std::lock_guard lock(mu_);
    poisoned = poisoned_;
    if (!poisoned) waiting_.emplace(&b, is_send);
  }
  if (poisoned) {  // do not block on a failed communicator: done already, or failed
    if (completed_anyway(b, is_send)) return;
    throw CommError(record_failure(peer, op, "the communicator failed").first);
  }
  std::string detail = "released because the communicator failed";
  bool done = false;
  try {
    done = is_send ? b.waitSend(nullptr, left(op)) : b.waitRecv(nullptr, left(op));
  } catch (const std::exception& e) {
    detail = e.what();
  }
  {
    std::lock_guard lock(mu_);
    waiting_.erase(&b);
  }
  if (done) return;
  const auto [why, aborted] = record_failure(peer, op, detail);
  // Gloo reports a broken connection even to a wait whose data had arrived just before
  // (a peer that finished and left): that operation did complete.
  if (!aborted && completed_anyway(b, is_send)) return;
  throw CommError(why);
}

// The first peer whose connection is broken, or -1: posting a receive on a broken
// connection throws at once. Used before poisoning (which breaks them all), to name
// the peer when Gloo's error does not (its messages carry socket addresses).
int GlooCommunicator::broken_peer() {
  if (!context_) return -1;
  std::unique_ptr<Buffer> probe;
  try {
    probe = context_->createUnboundBuffer(&watch_byte_, 1);
  } catch (const std::exception&) {
    return -1;
  }
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    try {
      probe->recv(q, slot_of(kProbe, 0, 0), 0, 0);
    } catch (const std::exception&) {
      return q;
    }
  }
  return -1;
}

}  // namespace troupe::comm::detail
