// Collectives of the Gloo communicator: descriptor exchange, rank-order reduce-scatter,
// direct all-gather, broadcast, barrier, and Gloo's ring allreduce.
#include <algorithm>

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "comm/gloo_detail.h"

namespace troupe::comm::detail {

void GlooCommunicator::all_reduce_sum(std::span<float> data) {
  const OpCtx op = begin(fmt::format("all_reduce_sum of {} floats", data.size()));
  if (size_ == 1) return;
  const uint32_t seq = next_seq();
  exchange_descriptors(
      {kMagic, uint32_t(OpCode::kAllReduce), seq, data.size(), -1, segment_, uint32_t(options_.reduction)}, op);
  if (options_.reduction == GlooReduction::kRing) return gloo_ring(data, seq, op);
  const Chunk mine = chunk_range(data.size(), size_, rank_);
  reduce_scatter_rank_order(data.data(), data.size(), data.data() + mine.begin, seq, op);
  all_gather_direct(data.data() + mine.begin, data.data(), data.size(), seq, kGatherSub, op);
}

void GlooCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  const OpCtx op = begin(fmt::format("reduce_scatter_sum of {} floats", in.size()));
  const Chunk mine = chunk_range(in.size(), size_, rank_);
  if (out.size() != mine.size())
    fail(
        fmt::format("{}: reduce_scatter_sum of {} elements gives rank {} a chunk of {}, but its output "
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

void GlooCommunicator::all_gather(std::span<const float> in, std::span<float> out) {
  const OpCtx op = begin(fmt::format("all_gather into {} floats", out.size()));
  const Chunk mine = chunk_range(out.size(), size_, rank_);
  if (in.size() != mine.size())
    fail(fmt::format("{}: all_gather into {} elements expects rank {}'s chunk of {}, got {}", name_, out.size(),
                     rank_, mine.size(), in.size()));
  if (size_ == 1) {
    if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
    return;
  }
  const uint32_t seq = next_seq();
  exchange_descriptors({kMagic, uint32_t(OpCode::kAllGather), seq, out.size(), -1, 0, 0}, op);
  all_gather_direct(in.data(), out.data(), out.size(), seq, 0, op);
}

void GlooCommunicator::broadcast(std::span<float> data, int root) {
  const OpCtx op = begin(fmt::format("broadcast of {} floats from rank {}", data.size(), root));
  if (root < 0 || root >= size_) fail(fmt::format("{}: broadcast root {} outside 0..{}", name_, root, size_ - 1));
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
void GlooCommunicator::barrier() {
  const OpCtx op = begin("barrier");
  if (size_ == 1) return;
  exchange_descriptors({kMagic, uint32_t(OpCode::kBarrier), next_seq(), 0, -1, 0, 0}, op);
}

// Sends `mine` to every other member, receives theirs, and fails on any difference.
// The receives were posted ahead (by the constructor or the previous exchange); the
// next ones are posted as soon as these complete.
void GlooCommunicator::exchange_descriptors(const Desc& mine, const OpCtx& op) {
  std::vector<Desc> theirs(size_);
  std::vector<std::unique_ptr<Buffer>> sends(size_);
  const uint64_t slot = slot_of(kDesc, 0, 0);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (!desc_bufs_[q]) {  // the constructor could not post it
      desc_bufs_[q] = make_buffer(&next_desc_[q], sizeof(Desc), q, op);
      post(*desc_bufs_[q], false, q, slot, 0, sizeof(Desc), op);
    }
    sends[q] = make_buffer(&mine, sizeof(Desc), q, op);
    post(*sends[q], true, q, slot, 0, sizeof(Desc), op);
  }
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    wait(*desc_bufs_[q], false, q, op);
    theirs[q] = next_desc_[q];
    // Post the receive of q's next descriptor now. When q has left meanwhile (it
    // finished and closed), this operation still completed; the next one will say so.
    try {
      desc_bufs_[q]->recv(q, slot, 0, sizeof(Desc));
    } catch (const std::exception&) {
      desc_bufs_[q].reset();
    }
  }
  for (int q = 0; q < size_; ++q)
    if (q != rank_) wait(*sends[q], true, q, op);
  for (int q = 0; q < size_; ++q)
    if (q != rank_ && !(theirs[q] == mine))
      fail(fmt::format("{}: rank {} called {} while rank {} called {}", name_, rank_, mine.str(), q,
                       theirs[q].magic == kMagic ? theirs[q].str() : std::string("something unreadable")));
}

// Segments are at most segment_bytes, and smaller for large groups, so that the
// staging (two segments from every other member) stays within 64 MB. Every member
// computes the same value: segment_bytes is in the descriptor, and the size is shared.
size_t GlooCommunicator::segment_for_members() const {
  constexpr size_t kStagingFloats = size_t(16) << 20;
  const size_t cap = std::max<size_t>(1024, kStagingFloats / (2 * size_t(size_ - 1)));
  return std::min(segment_, cap);
}

// Rank r receives chunk r of every member and adds them in rank order 0..n-1 into
// `out` (chunk r's length), exactly as the in-process communicator does. The chunk
// arrives in segments; two are in flight while the previous one is summed. `out`
// may be this rank's own chunk of `in`: that chunk is never sent, and each block is
// read completely before it is written.
void GlooCommunicator::reduce_scatter_rank_order(const float* in, size_t n, float* out, uint32_t seq,
                                                 const OpCtx& op) {
  const int others = size_ - 1;
  const Chunk mine = chunk_range(n, size_, rank_);
  const size_t segment = segment_for_members();
  const auto segments = [&](size_t len) { return (len + segment - 1) / segment; };
  if (segments(n) >= kGatherSub)
    fail(fmt::format("{}: {} needs {} segments of {} floats; raise segment_bytes", name_, op.what, segments(n),
                     segment));

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
      const size_t lo = s * segment, len = std::min(segment, c.size() - lo);
      post(*o.buf, true, q, slot_of(kData, seq, uint32_t(s)), lo * sizeof(float), len * sizeof(float), op);
    }
    sends.push_back(std::move(o));
  }

  // Staging for two segments from each other member: stage[(s % 2) * others + j].
  const size_t nseg = segments(mine.size());
  const size_t seg_len = std::min(segment, mine.size());
  std::vector<float> stage(2 * size_t(others) * seg_len);
  std::vector<std::unique_ptr<Buffer>> recvs(2 * size_t(others));
  std::vector<int> peer_of(others);
  for (int q = 0, j = 0; q < size_; ++q)
    if (q != rank_) peer_of[j++] = q;
  const auto seg_size = [&](size_t s) { return std::min(segment, mine.size() - s * segment); };
  const auto post_recvs = [&](size_t s) {
    for (int j = 0; j < others; ++j) {
      auto& b = recvs[(s % 2) * others + j];
      if (!b)
        b = make_buffer(stage.data() + ((s % 2) * others + j) * seg_len, seg_len * sizeof(float), peer_of[j], op);
      post(*b, false, peer_of[j], slot_of(kData, seq, uint32_t(s)), 0, seg_size(s) * sizeof(float), op);
    }
  };
  for (size_t s = 0; s < std::min<size_t>(2, nseg); ++s) post_recvs(s);

  constexpr size_t kBlock = 1024;
  float sum[kBlock];
  std::vector<const float*> term(size_);
  for (size_t s = 0; s < nseg; ++s) {
    for (int j = 0; j < others; ++j) wait(*recvs[(s % 2) * others + j], false, peer_of[j], op);
    const size_t lo = s * segment, len = seg_size(s);
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
void GlooCommunicator::all_gather_direct(const float* in, float* out, size_t n, uint32_t seq, uint32_t sub,
                                         const OpCtx& op) {
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
void GlooCommunicator::gloo_ring(std::span<float> data, uint32_t seq, const OpCtx& op) {
  if (data.empty()) return;
  try {
    gloo::AllreduceOptions o(context_);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setOutput(data.data(), data.size());
    o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    o.setTag(seq);
    o.setTimeout(left(op));
    gloo::allreduce(o);
  } catch (const std::exception& e) {
    throw CommError(record_failure(broken_peer(), op, e.what()).first);
  }
}

}  // namespace troupe::comm::detail
