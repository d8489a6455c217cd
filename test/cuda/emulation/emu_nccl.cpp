// The NCCL emulation (include/nccl.h says what it does). A communicator's members meet
// in a Clique found by their unique ID; each collective is the members' n-th call on
// it, and the last member to arrive computes the result for all (inside a DeviceAccess,
// since every buffer is device memory) while the others wait outside it.
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
// A collective whose members never all arrive fails after this instead of hanging a test.
constexpr auto kMeetingTimeout = std::chrono::seconds(120);

enum class Op { kAllReduce, kReduceScatter, kAllGather, kReduce, kBroadcast };

// One member's part of a collective.
struct Part {
  Op op;
  const void* send;
  void* recv;
  size_t count;  // per member: AllReduce/Reduce/Broadcast the buffer; ReduceScatter recvcount; AllGather sendcount
  ncclDataType_t type;
  int root;
};

struct Meeting {
  std::vector<Part> parts;  // by rank
  int arrived = 0;
  bool done = false;
  ncclResult_t result = ncclSuccess;
  std::string error;
};

struct Clique {
  explicit Clique(int n) : size(n), joined(size_t(n), false) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> joined;
  int members = 0;
  bool broken = false;  // a member aborted
  std::map<uint64_t, Meeting> meetings;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail;  // (from, to) -> messages in order
};

std::mutex g_cliques_mu;
std::map<std::string, std::weak_ptr<Clique>> g_cliques;

std::shared_ptr<Clique> clique_of(const ncclUniqueId& id, int nranks) {
  const std::string key(id.internal, NCCL_UNIQUE_ID_BYTES);
  std::lock_guard lock(g_cliques_mu);
  if (auto c = g_cliques[key].lock()) return c->size == nranks ? c : nullptr;
  auto c = std::make_shared<Clique>(nranks);
  g_cliques[key] = c;
  return c;
}

size_t type_size(ncclDataType_t) { return 4; }  // float and int32

// out = sum over members of in[r], in rank order.
void add_into(std::vector<char>& out, const void* in, size_t count, ncclDataType_t type, bool first) {
  if (type == ncclFloat) {
    auto* o = reinterpret_cast<float*>(out.data());
    const auto* x = static_cast<const float*>(in);
    for (size_t i = 0; i < count; ++i) o[i] = first ? x[i] : o[i] + x[i];
  } else {
    auto* o = reinterpret_cast<int32_t*>(out.data());
    const auto* x = static_cast<const int32_t*>(in);
    for (size_t i = 0; i < count; ++i) o[i] = first ? x[i] : o[i] + x[i];
  }
}

// Computes a meeting every member has arrived at. Reads every input before writing any
// output, so in-place calls are fine.
void compute(Meeting& m, int size) {
  const Part& p0 = m.parts[0];
  for (int r = 1; r < size; ++r) {
    const Part& p = m.parts[size_t(r)];
    if (p.op != p0.op || p.count != p0.count || p.type != p0.type || p.root != p0.root) {
      m.result = ncclInvalidUsage;
      m.error = "members made different calls (op, count, type or root) at the same point";
      return;
    }
  }
  const size_t es = type_size(p0.type), n = p0.count;
  troupe_emu::DeviceAccess device;
  std::vector<char> tmp;
  switch (p0.op) {
    case Op::kAllReduce:
    case Op::kReduce:
      tmp.resize(n * es);
      for (int r = 0; r < size; ++r) add_into(tmp, m.parts[size_t(r)].send, n, p0.type, r == 0);
      for (int r = 0; r < size; ++r)
        if (p0.op == Op::kAllReduce || r == p0.root) std::memcpy(m.parts[size_t(r)].recv, tmp.data(), n * es);
      break;
    case Op::kBroadcast:
      tmp.assign(static_cast<const char*>(m.parts[size_t(p0.root)].send),
                 static_cast<const char*>(m.parts[size_t(p0.root)].send) + n * es);
      for (int r = 0; r < size; ++r) std::memcpy(m.parts[size_t(r)].recv, tmp.data(), n * es);
      break;
    case Op::kReduceScatter:
      tmp.resize(size_t(size) * n * es);
      for (int r = 0; r < size; ++r) add_into(tmp, m.parts[size_t(r)].send, size_t(size) * n, p0.type, r == 0);
      for (int r = 0; r < size; ++r) std::memcpy(m.parts[size_t(r)].recv, tmp.data() + size_t(r) * n * es, n * es);
      break;
    case Op::kAllGather:
      tmp.resize(size_t(size) * n * es);
      for (int r = 0; r < size; ++r) std::memcpy(tmp.data() + size_t(r) * n * es, m.parts[size_t(r)].send, n * es);
      for (int r = 0; r < size; ++r) std::memcpy(m.parts[size_t(r)].recv, tmp.data(), tmp.size());
      break;
  }
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  uint64_t next_meeting = 0;
  std::string last_error;
};

namespace {

// A member's calls between ncclGroupStart and ncclGroupEnd (this thread's).
struct Deferred {
  enum Kind { kCollective, kSend, kRecv } kind;
  ncclComm* comm;
  Part part;
  int peer;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Deferred> t_group;

ncclResult_t failure(ncclComm* comm, ncclResult_t r, const std::string& why) {
  if (comm) comm->last_error = why;
  return r;
}

ncclResult_t run_collective(ncclComm* comm, const Part& part) {
  Clique& c = *comm->clique;
  std::unique_lock lock(c.mu);
  if (c.broken) return failure(comm, ncclRemoteError, "a member of this communicator aborted");
  if (c.members < c.size) return failure(comm, ncclInvalidUsage, "a collective before every member joined");
  Meeting& m = c.meetings[comm->next_meeting];
  const uint64_t id = comm->next_meeting++;
  if (m.parts.empty()) m.parts.resize(size_t(c.size));
  m.parts[size_t(comm->rank)] = part;
  if (++m.arrived == c.size) {
    lock.unlock();  // compute() takes the device lock; nobody else touches m until done
    compute(m, c.size);
    lock.lock();
    m.done = true;
    c.cv.notify_all();
  } else if (!c.cv.wait_until(lock, Clock::now() + kMeetingTimeout, [&] { return m.done || c.broken; })) {
    return failure(comm, ncclSystemError, "not every member made the matching call within 120 s");
  }
  if (!m.done) return failure(comm, ncclRemoteError, "a member of this communicator aborted");
  const ncclResult_t r = m.result;
  const std::string error = m.error;
  if (--m.arrived == 0) c.meetings.erase(id);  // the last one out
  return r == ncclSuccess ? r : failure(comm, r, error);
}

ncclResult_t post_send(ncclComm* comm, const void* data, size_t bytes, int peer) {
  std::vector<char> msg(bytes);
  {
    troupe_emu::DeviceAccess device;
    std::memcpy(msg.data(), data, bytes);
  }
  Clique& c = *comm->clique;
  std::lock_guard lock(c.mu);
  c.mail[{comm->rank, peer}].push_back(std::move(msg));
  c.cv.notify_all();
  return ncclSuccess;
}

ncclResult_t take_recv(ncclComm* comm, void* data, size_t bytes, int peer) {
  Clique& c = *comm->clique;
  std::unique_lock lock(c.mu);
  auto& box = c.mail[{peer, comm->rank}];
  if (!c.cv.wait_until(lock, Clock::now() + kMeetingTimeout, [&] { return !box.empty() || c.broken; }))
    return failure(comm, ncclSystemError, "nothing arrived from rank " + std::to_string(peer) + " within 120 s");
  if (box.empty()) return failure(comm, ncclRemoteError, "a member of this communicator aborted");
  std::vector<char> msg = std::move(box.front());
  box.pop_front();
  lock.unlock();
  if (msg.size() != bytes)
    return failure(comm, ncclInvalidUsage,
                   "received " + std::to_string(msg.size()) + " bytes where " + std::to_string(bytes) + " were expected");
  troupe_emu::DeviceAccess device;
  std::memcpy(data, msg.data(), bytes);
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm* comm) {
  if (!comm || !comm->clique) return ncclInvalidArgument;
  return ncclSuccess;
}

// Runs one call, now or at ncclGroupEnd.
ncclResult_t run(const Deferred& d) {
  const size_t bytes = d.part.count * type_size(d.part.type);
  switch (d.kind) {
    case Deferred::kSend: return post_send(d.comm, d.part.send, bytes, d.peer);
    case Deferred::kRecv: return take_recv(d.comm, d.part.recv, bytes, d.peer);
    case Deferred::kCollective: return run_collective(d.comm, d.part);
  }
  return ncclInternalError;
}

// A call after its checks: deferred inside a group, else run.
ncclResult_t call(const Deferred& d) {
  if (const auto r = check_comm(d.comm); r != ncclSuccess) return r;
  if (d.part.type != ncclFloat && d.part.type != ncclInt32)
    return failure(d.comm, ncclInvalidArgument, "unsupported type");
  if (d.kind != Deferred::kCollective && (d.peer < 0 || d.peer >= d.comm->clique->size || d.peer == d.comm->rank))
    return ncclInvalidArgument;
  if (t_group_depth > 0) {
    t_group.push_back(d);
    return ncclSuccess;
  }
  return run(d);
}

ncclResult_t collective(ncclComm* comm, const Part& part) { return call({Deferred::kCollective, comm, part, 0}); }

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  *version = 22800;  // reports itself as NCCL 2.28.0
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  static uint64_t counter = 0;
  std::lock_guard lock(mu);
  std::memset(id->internal, 0, NCCL_UNIQUE_ID_BYTES);
  const uint64_t words[3] = {rng(), rng(), ++counter};
  std::memcpy(id->internal, words, sizeof(words));
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error.c_str() : ""; }

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto clique = clique_of(id, nranks);
  if (!clique) return ncclInvalidUsage;  // the same ID with another size
  {
    std::lock_guard lock(clique->mu);
    if (clique->joined[size_t(rank)]) return ncclInvalidUsage;
    clique->joined[size_t(rank)] = true;
    ++clique->members;
    clique->cv.notify_all();
  }
  auto* c = new ncclComm;
  c->clique = std::move(clique);
  c->rank = rank;
  *comm = c;
  if (t_group_depth > 0 || (config && config->blocking == 0)) return ncclInProgress;
  std::unique_lock lock(c->clique->mu);
  c->clique->cv.wait(lock, [&] { return c->clique->members == nranks; });
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (const auto r = check_comm(comm); r != ncclSuccess) return r;
  std::lock_guard lock(comm->clique->mu);
  if (comm->clique->broken) *state = ncclRemoteError;
  else *state = comm->clique->members < comm->clique->size ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->clique) {
    std::lock_guard lock(comm->clique->mu);
    comm->clique->broken = true;
    comm->clique->cv.notify_all();
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Deferred> calls;
  calls.swap(t_group);
  ncclResult_t result = ncclSuccess;
  // Sends first, so that members receiving from each other in one group cannot wait on
  // each other; then receives and collectives in call order.
  for (const auto& d : calls)
    if (d.kind == Deferred::kSend && result == ncclSuccess) result = run(d);
  for (const auto& d : calls)
    if (d.kind != Deferred::kSend && result == ncclSuccess) result = run(d);
  return result;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t,
                           ncclComm_t comm, cudaStream_t) {
  return collective(comm, {Op::kAllReduce, send, recv, count, type, 0});
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t,
                               ncclComm_t comm, cudaStream_t) {
  return collective(comm, {Op::kReduceScatter, send, recv, recvcount, type, 0});
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  return collective(comm, {Op::kAllGather, send, recv, sendcount, type, 0});
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t, int root,
                        ncclComm_t comm, cudaStream_t) {
  return collective(comm, {Op::kReduce, send, recv, count, type, root});
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  return collective(comm, {Op::kBroadcast, send, recv, count, type, root});
}

// (Part's op is unused for point to point.)
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return call({Deferred::kSend, comm, {Op::kAllReduce, send, nullptr, count, type, 0}, peer});
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return call({Deferred::kRecv, comm, {Op::kAllReduce, nullptr, recv, count, type, 0}, peer});
}
