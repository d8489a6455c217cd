// Point to point on the Gloo communicator: buffered sends (delivered in the background)
// and receives checked against the sender's header.
#include <algorithm>

#include "comm/gloo_detail.h"

namespace troupe::comm::detail {

void GlooCommunicator::send(std::span<const float> data, int peer, int tag) {
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

void GlooCommunicator::recv(std::span<float> data, int peer, int tag) {
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

void GlooCommunicator::recv_payload(std::span<float> data, int peer, int tag, const OpCtx& op) {
  auto db = make_buffer(data.data(), data.size() * sizeof(float), peer, op);
  post(*db, false, peer, slot_of(kP2PData, uint32_t(tag), 0), 0, data.size() * sizeof(float), op);
  wait(*db, false, peer, op);
}

// Waits for buffered sends in the order they were posted, each until its deadline.
void GlooCommunicator::reap_sends() {
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

}  // namespace troupe::comm::detail
