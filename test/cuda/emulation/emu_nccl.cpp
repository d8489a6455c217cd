// The NCCL emulation (include/nccl.h says what it does). A communicator's members meet
// in a directory named after their unique ID (under TROUPE_EMU_NCCL_DIR, else
// /dev/shm/troupe-emu-nccl-UID), so members may be threads of one process or separate
// processes (cluster mode's workers). Every exchange is a file published by rename:
//   join.R        member R joined (its content: the group size it was created with)
//   cK.R          member R's part of its K-th collective (a header, then its data)
//   pF-T.N        the N-th message from member F to member T (deleted on receipt)
//   broken        a member aborted
//   left.R        member R is gone; the last one to leave removes the directory
// Each member waits for the others' files of a collective, then computes the result
// itself from all of them, adding in rank order, so every member gets the same bits.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
// A collective whose members never all arrive fails after this instead of hanging a test.
constexpr auto kMeetingTimeout = std::chrono::seconds(120);

enum class Op : int32_t { kAllReduce, kReduceScatter, kAllGather, kReduce, kBroadcast };

// One member's part of a collective.
struct Part {
  Op op;
  const void* send;
  void* recv;
  size_t count;  // per member: AllReduce/Reduce/Broadcast the buffer; ReduceScatter recvcount; AllGather sendcount
  ncclDataType_t type;
  int root;
};

// The head of a cK.R file; the member's data follows it.
struct Header {
  int32_t op, type, root, pad;
  uint64_t count;
  bool operator==(const Header&) const = default;
};

size_t type_size(ncclDataType_t) { return 4; }  // float and int32

fs::path root_dir() {
  if (const char* e = std::getenv("TROUPE_EMU_NCCL_DIR"); e && *e) return e;
  std::error_code ec;
  const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  return base / ("troupe-emu-nccl-" + std::to_string(::getuid()));
}

fs::path clique_dir(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (int i = 0; i < 24; ++i) {  // ncclGetUniqueId fills these
    const auto b = static_cast<unsigned char>(id.internal[i]);
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return root_dir() / hex;
}

// Publishes `bytes` as dir/name in one step (a temporary name, then rename).
bool publish(const fs::path& dir, const std::string& name, const std::vector<char>& bytes) {
  const fs::path tmp = dir / (".tmp." + name);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, dir / name, ec);
  return !ec;
}

std::optional<std::vector<char>> read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// "kind.rank" and the like (appended piece by piece: GCC 12 warns on chained string +).
std::string name_of(const char* kind, uint64_t a, const char* sep = "", int64_t b = -1, const char* sep2 = "",
                    int64_t c = -1) {
  std::string s = kind;
  s += std::to_string(a);
  if (b >= 0) (s += sep) += std::to_string(b);
  if (c >= 0) (s += sep2) += std::to_string(c);
  return s;
}
std::string member_file(const char* kind, int rank) { return name_of(kind, uint64_t(rank)); }
std::string meeting_file(uint64_t k, int rank) { return name_of("c", k, ".", rank); }
std::string mail_file(int from, int to, uint64_t n) { return name_of("p", uint64_t(from), "-", to, ".", int64_t(n)); }

// out = sum over members of in[r], in rank order.
void add_into(std::vector<char>& out, const char* in, size_t count, ncclDataType_t type, bool first) {
  if (type == ncclFloat) {
    auto* o = reinterpret_cast<float*>(out.data());
    const auto* x = reinterpret_cast<const float*>(in);
    for (size_t i = 0; i < count; ++i) o[i] = first ? x[i] : o[i] + x[i];
  } else {
    auto* o = reinterpret_cast<int32_t*>(out.data());
    const auto* x = reinterpret_cast<const int32_t*>(in);
    for (size_t i = 0; i < count; ++i) o[i] = first ? x[i] : o[i] + x[i];
  }
}

}  // namespace

struct ncclComm {
  fs::path dir;
  int size = 0;
  int rank = 0;
  uint64_t next_meeting = 0;
  std::map<int, uint64_t> sent, received;  // messages per peer
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

// Polls until `ready` (never holding the device, which the others need to write their
// parts); fails when a member aborted or after kMeetingTimeout.
ncclResult_t await(ncclComm* comm, const std::function<bool()>& ready, const std::string& late) {
  const auto deadline = Clock::now() + kMeetingTimeout;
  auto pause = std::chrono::microseconds(20);
  while (!ready()) {
    if (present(comm->dir / "broken")) return failure(comm, ncclRemoteError, "a member of this communicator aborted");
    if (Clock::now() > deadline) return failure(comm, ncclSystemError, late);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  return ncclSuccess;
}

int joined(const ncclComm* comm) {
  int n = 0;
  for (int r = 0; r < comm->size; ++r) n += present(comm->dir / member_file("join.", r));
  return n;
}

// The bytes this member contributes to a collective.
size_t part_bytes(const Part& p, int size, int rank) {
  const size_t es = type_size(p.type);
  switch (p.op) {
    case Op::kReduceScatter: return size_t(size) * p.count * es;
    case Op::kBroadcast: return rank == p.root ? p.count * es : 0;
    default: return p.count * es;
  }
}

// Computes this member's result from every member's file (all of them read before
// anything is written, so in-place calls are fine).
ncclResult_t compute(ncclComm* comm, const Part& p, const std::vector<std::vector<char>>& files) {
  const Header mine{int32_t(p.op), int32_t(p.type), p.root, 0, p.count};
  for (int r = 0; r < comm->size; ++r) {
    const auto& f = files[size_t(r)];
    Header h{};
    if (f.size() >= sizeof h) std::memcpy(&h, f.data(), sizeof h);
    if (f.size() < sizeof h || !(h == mine) || f.size() != sizeof h + part_bytes(p, comm->size, r))
      return failure(comm, ncclInvalidUsage, "members made different calls (op, count, type or root) at the same point");
  }
  auto data = [&](int r) { return files[size_t(r)].data() + sizeof(Header); };
  const size_t es = type_size(p.type), n = p.count;
  const int size = comm->size;
  std::vector<char> out;
  switch (p.op) {
    case Op::kAllReduce:
    case Op::kReduce:
      out.resize(n * es);
      for (int r = 0; r < size; ++r) add_into(out, data(r), n, p.type, r == 0);
      if (p.op == Op::kReduce && comm->rank != p.root) return ncclSuccess;
      break;
    case Op::kBroadcast: out.assign(data(p.root), data(p.root) + n * es); break;
    case Op::kReduceScatter: {
      std::vector<char> all(size_t(size) * n * es);
      for (int r = 0; r < size; ++r) add_into(all, data(r), size_t(size) * n, p.type, r == 0);
      out.assign(all.begin() + std::ptrdiff_t(size_t(comm->rank) * n * es),
                 all.begin() + std::ptrdiff_t(size_t(comm->rank + 1) * n * es));
      break;
    }
    case Op::kAllGather:
      for (int r = 0; r < size; ++r) out.insert(out.end(), data(r), data(r) + n * es);
      break;
  }
  troupe_emu::DeviceAccess device;
  std::memcpy(p.recv, out.data(), out.size());
  return ncclSuccess;
}

ncclResult_t run_collective(ncclComm* comm, const Part& part) {
  if (present(comm->dir / "broken")) return failure(comm, ncclRemoteError, "a member of this communicator aborted");
  if (joined(comm) < comm->size) return failure(comm, ncclInvalidUsage, "a collective before every member joined");
  const uint64_t k = comm->next_meeting++;
  std::vector<char> bytes(sizeof(Header) + part_bytes(part, comm->size, comm->rank));
  const Header h{int32_t(part.op), int32_t(part.type), part.root, 0, part.count};
  std::memcpy(bytes.data(), &h, sizeof h);
  if (bytes.size() > sizeof h) {
    troupe_emu::DeviceAccess device;
    std::memcpy(bytes.data() + sizeof h, part.send, bytes.size() - sizeof h);
  }
  if (!publish(comm->dir, meeting_file(k, comm->rank), bytes))
    return failure(comm, ncclSystemError, "cannot write to " + comm->dir.string());
  auto all_there = [&] {
    for (int r = 0; r < comm->size; ++r)
      if (!present(comm->dir / meeting_file(k, r))) return false;
    return true;
  };
  if (const auto r = await(comm, all_there, "not every member made the matching call within 120 s"); r != ncclSuccess)
    return r;
  std::vector<std::vector<char>> files;
  for (int r = 0; r < comm->size; ++r) {
    auto f = read_whole(comm->dir / meeting_file(k, r));
    if (!f) return failure(comm, ncclSystemError, "cannot read " + (comm->dir / meeting_file(k, r)).string());
    files.push_back(std::move(*f));
  }
  // Everyone has read meeting k-1, since they all wrote meeting k.
  std::error_code ec;
  if (k > 0) fs::remove(comm->dir / meeting_file(k - 1, comm->rank), ec);
  return compute(comm, part, files);
}

ncclResult_t post_send(ncclComm* comm, const void* data, size_t bytes, int peer) {
  std::vector<char> msg(bytes);
  {
    troupe_emu::DeviceAccess device;
    std::memcpy(msg.data(), data, bytes);
  }
  if (!publish(comm->dir, mail_file(comm->rank, peer, comm->sent[peer]++), msg))
    return failure(comm, ncclSystemError, "cannot write to " + comm->dir.string());
  return ncclSuccess;
}

ncclResult_t take_recv(ncclComm* comm, void* data, size_t bytes, int peer) {
  const fs::path file = comm->dir / mail_file(peer, comm->rank, comm->received[peer]);
  if (const auto r = await(comm, [&] { return present(file); },
                           "nothing arrived from rank " + std::to_string(peer) + " within 120 s");
      r != ncclSuccess)
    return r;
  auto msg = read_whole(file);
  if (!msg) return failure(comm, ncclSystemError, "cannot read " + file.string());
  ++comm->received[peer];
  std::error_code ec;
  fs::remove(file, ec);
  if (msg->size() != bytes)
    return failure(comm, ncclInvalidUsage,
                   "received " + std::to_string(msg->size()) + " bytes where " + std::to_string(bytes) + " were expected");
  troupe_emu::DeviceAccess device;
  std::memcpy(data, msg->data(), bytes);
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm* comm) {
  if (!comm || comm->size < 1) return ncclInvalidArgument;
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
  if (d.kind != Deferred::kCollective && (d.peer < 0 || d.peer >= d.comm->size || d.peer == d.comm->rank))
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
  const fs::path dir = clique_dir(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return ncclSystemError;
  // The same ID with another size, or a rank that joined already.
  for (int r = 0; r < nranks; ++r) {
    const auto other = read_whole(dir / member_file("join.", r));
    if (other && std::string(other->begin(), other->end()) != std::to_string(nranks)) return ncclInvalidUsage;
  }
  if (present(dir / member_file("join.", rank))) return ncclInvalidUsage;
  const std::string size_text = std::to_string(nranks);
  if (!publish(dir, member_file("join.", rank), {size_text.begin(), size_text.end()})) return ncclSystemError;
  auto* c = new ncclComm;
  c->dir = dir;
  c->size = nranks;
  c->rank = rank;
  *comm = c;
  if (t_group_depth > 0 || (config && config->blocking == 0)) return ncclInProgress;
  return await(c, [&] { return joined(c) == nranks; }, "not every member joined within 120 s");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (const auto r = check_comm(comm); r != ncclSuccess) return r;
  if (present(comm->dir / "broken")) *state = ncclRemoteError;
  else *state = joined(comm) < comm->size ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  publish(comm->dir, "broken", {});
  publish(comm->dir, member_file("left.", comm->rank), {});
  // The last to leave of those who joined (some may never have) removes the directory.
  bool all_left = true;
  for (int r = 0; r < comm->size && all_left; ++r)
    all_left = !present(comm->dir / member_file("join.", r)) || present(comm->dir / member_file("left.", r));
  std::error_code ec;
  if (all_left) fs::remove_all(comm->dir, ec);
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
