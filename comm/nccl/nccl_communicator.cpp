#include "comm/nccl/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "kernels/cuda/cuda_check.h"

namespace troupe::comm {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::cuda::Event;
using kernels::cuda::Stream;

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string(ncclGetErrorString(r)) + " (ncclResult " + std::to_string(int(r)) + ")";
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += ": " + std::string(last);
  return s;
}

// Polls a non-blocking communicator until its pending work leaves ncclInProgress;
// returns the final state, or ncclInProgress when the deadline passed first or *stop
// became true.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
  for (;;) {
    ncclResult_t st = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &st);
    if (q != ncclSuccess) return q;
    if (st != ncclInProgress) return st;
    if (Clock::now() > deadline || (stop && *stop)) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

ncclUniqueId to_nccl(const NcclId& id) {
  static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclId>, "NcclId must hold an ncclUniqueId");
  ncclUniqueId u;
  std::memcpy(u.internal, id.data(), id.size());
  return u;
}

std::string member(const std::string& name, int rank, int size) {
  return name + ": rank " + std::to_string(rank) + " of " + std::to_string(size);
}

void set_device(int ordinal) { TROUPE_CUDA_CHECK(cudaSetDevice(ordinal)); }

}  // namespace

NcclId nccl_unique_id() {
  ncclUniqueId u;
  const ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) throw CommError(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  NcclId id;
  std::memcpy(id.data(), u.internal, id.size());
  return id;
}

std::string nccl_id_to_hex(const NcclId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(id.size() * 2);
  for (char c : id) {
    const auto b = static_cast<unsigned char>(c);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

NcclId nccl_id_from_hex(std::string_view hex) {
  NcclId id{};
  if (hex.size() != id.size() * 2)
    throw CommError("NCCL unique ID: expected " + std::to_string(id.size() * 2) + " hex digits, got " +
                    std::to_string(hex.size()));
  auto nibble = [&](size_t i) {
    const char c = hex[i];
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw CommError("NCCL unique ID: character '" + std::string(1, c) + "' at offset " + std::to_string(i) +
                    " is not a hex digit");
  };
  for (size_t i = 0; i < id.size(); ++i) id[i] = char(nibble(2 * i) * 16 + nibble(2 * i + 1));
  return id;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// ---- creation ---------------------------------------------------------------------

std::shared_ptr<NcclCommunicator> make_nccl_communicator(const NcclId& id, int rank, int size,
                                                         kernels::cuda::CudaDevice& device, std::string name,
                                                         std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError(name + ": rank " + std::to_string(rank) + " is outside a group of " + std::to_string(size));
  set_device(device.ordinal());
  ncclConfig_t cfg = nonblocking_config();
  ncclComm_t comm = nullptr;
  const auto deadline = Clock::now() + timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, to_nccl(id), rank, &cfg);
  if (r == ncclInProgress || (r == ncclSuccess && comm)) r = settle(comm, deadline);
  if (r != ncclSuccess) {
    std::string cause = r == ncclInProgress
                            ? "not every member joined within " + std::to_string(timeout.count()) +
                                  " ms (same unique ID and size on every member?)"
                            : nccl_error(r, comm);
    if (comm) ncclCommAbort(comm);
    throw CommError(member(name, rank, size) + ": creating the NCCL communicator failed: " + cause);
  }
  return std::make_shared<NcclCommunicator>(comm, rank, size, device, std::move(name), timeout);
}

std::vector<std::shared_ptr<NcclCommunicator>> make_nccl_group(const std::vector<kernels::cuda::CudaDevice*>& devices,
                                                               std::string name, std::chrono::milliseconds timeout) {
  const int n = int(devices.size());
  if (n < 1) throw CommError(name + ": a communicator group needs at least one member");
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (devices[size_t(a)]->ordinal() == devices[size_t(b)]->ordinal())
        throw CommError(name + ": members " + std::to_string(a) + " and " + std::to_string(b) + " share CUDA device " +
                        std::to_string(devices[size_t(a)]->ordinal()) +
                        " (NCCL allows one rank per GPU; use an in-process communicator)");
  const ncclUniqueId uid = to_nccl(nccl_unique_id());
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  const auto deadline = Clock::now() + timeout;
  auto abort_all = [&] {
    for (auto c : comms)
      if (c) ncclCommAbort(c);
  };
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; i < n && r == ncclSuccess; ++i) {
    set_device(devices[size_t(i)]->ordinal());
    ncclConfig_t cfg = nonblocking_config();
    r = ncclCommInitRankConfig(&comms[size_t(i)], n, uid, i, &cfg);
    if (r == ncclInProgress) r = ncclSuccess;
  }
  const ncclResult_t g = ncclGroupEnd();
  if (r != ncclSuccess || (g != ncclSuccess && g != ncclInProgress)) {
    const std::string cause = nccl_error(r != ncclSuccess ? r : g, nullptr);
    abort_all();
    throw CommError(name + ": creating " + std::to_string(n) + " NCCL communicators failed: " + cause);
  }
  for (int i = 0; i < n; ++i) {
    const ncclResult_t s = settle(comms[size_t(i)], deadline);
    if (s != ncclSuccess) {
      const std::string cause = s == ncclInProgress ? "not ready within " + std::to_string(timeout.count()) + " ms"
                                                    : nccl_error(s, comms[size_t(i)]);
      abort_all();
      throw CommError(member(name, i, n) + ": creating the NCCL communicator failed: " + cause);
    }
  }
  std::vector<std::shared_ptr<NcclCommunicator>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_shared<NcclCommunicator>(comms[size_t(i)], i, n, *devices[size_t(i)], name, timeout));
  return out;
}

namespace {

// `device` as the CUDA device NCCL needs; CommError naming group `name` otherwise.
kernels::cuda::CudaDevice& cuda_of(const std::shared_ptr<kernels::Device>& device, const std::string& name) {
  auto* c = dynamic_cast<kernels::cuda::CudaDevice*>(device.get());
  if (!c) throw CommError(name + ": NCCL needs a CUDA device, got " + (device ? device->describe() : "none"));
  return *c;
}

}  // namespace

kernels::DeviceGroups::MakeGroup nccl_group_maker() {
  return [](const std::vector<std::shared_ptr<kernels::Device>>& devices, const std::string& name,
            std::chrono::milliseconds timeout) {
    std::vector<kernels::cuda::CudaDevice*> cuda;
    for (const auto& d : devices) cuda.push_back(&cuda_of(d, name));
    std::vector<std::shared_ptr<Communicator>> out;
    auto members = make_nccl_group(cuda, name, timeout);
    for (size_t i = 0; i < members.size(); ++i) {
      members[i]->hold(devices[i]);
      out.push_back(std::move(members[i]));
    }
    return out;
  };
}

kernels::DeviceGroups nccl_groups() {
  kernels::DeviceGroups g;
  g.make = nccl_group_maker();
  g.new_id = [] { return nccl_id_to_hex(nccl_unique_id()); };
  auto join = [](const std::string& id, int rank, int size, const std::shared_ptr<kernels::Device>& device,
                 const std::string& name, std::chrono::milliseconds timeout) {
    auto m = make_nccl_communicator(nccl_id_from_hex(id), rank, size, cuda_of(device, name), name, timeout);
    m->hold(device);
    return m;
  };
  g.join = join;
  g.join_pipeline_pair = [join](const std::string& forward, const std::string& backward, int rank,
                                const std::shared_ptr<kernels::Device>& device, const std::string& name,
                                std::chrono::milliseconds timeout) {
    return make_nccl_pipeline_pair(join(forward, rank, 2, device, name + "/forward", timeout),
                                   join(backward, rank, 2, device, name + "/backward", timeout), name);
  };
  return g;
}

// ---- pipeline neighbours: a communicator per direction ----------------------------

namespace {

class NcclPipelinePair final : public Communicator {
 public:
  NcclPipelinePair(std::shared_ptr<NcclCommunicator> forward, std::shared_ptr<NcclCommunicator> backward,
                   std::string name)
      : forward_(std::move(forward)), backward_(std::move(backward)), name_(std::move(name)) {
    if (forward_->size() != 2 || backward_->size() != 2 || forward_->rank() != backward_->rank())
      throw CommError(name_ + ": a pipeline pair needs two members in both directions");
  }
  int rank() const override { return forward_->rank(); }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }

  void all_reduce_sum(std::span<float> data) override { forward_->all_reduce_sum(data); }
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    forward_->reduce_scatter_sum(in, out);
  }
  void all_gather(std::span<const float> in, std::span<float> out) override { forward_->all_gather(in, out); }
  void broadcast(std::span<float> data, int root) override { forward_->broadcast(data, root); }
  void barrier() override { forward_->barrier(); }
  // Member 0 sends on the forward communicator, member 1 on the backward one.
  void send(std::span<const float> data, int peer, int tag) override { sending().send(data, peer, tag); }
  void recv(std::span<float> data, int peer, int tag) override { receiving().recv(data, peer, tag); }
  void abort(const std::string& why) override {
    forward_->abort(why);
    backward_->abort(why);
  }
  bool on_device() const override { return true; }
  void issue_all_reduce_sum(std::span<float> data) override { forward_->issue_all_reduce_sum(data); }
  void issue_reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    forward_->issue_reduce_scatter_sum(in, out);
  }
  void issue_all_gather(std::span<const float> in, std::span<float> out) override {
    forward_->issue_all_gather(in, out);
  }
  void issue_reduce_scatter_sum_part(std::span<float> all, size_t begin, size_t end) override {
    forward_->issue_reduce_scatter_sum_part(all, begin, end);
  }
  // Both communicators enqueue on the same device's communication stream.
  void device_waits_for_issued() override { forward_->device_waits_for_issued(); }
  void issue_send(std::span<const float> data, int peer, int tag) override { sending().issue_send(data, peer, tag); }
  void issue_recv(std::span<float> data, int peer, int tag) override { receiving().issue_recv(data, peer, tag); }

 private:
  NcclCommunicator& sending() { return rank() == 0 ? *forward_ : *backward_; }
  NcclCommunicator& receiving() { return rank() == 0 ? *backward_ : *forward_; }
  std::shared_ptr<NcclCommunicator> forward_, backward_;
  const std::string name_;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_pipeline_pair(std::shared_ptr<NcclCommunicator> forward,
                                                      std::shared_ptr<NcclCommunicator> backward, std::string name) {
  return std::make_shared<NcclPipelinePair>(std::move(forward), std::move(backward), std::move(name));
}

// ---- the communicator -------------------------------------------------------------

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int size, kernels::cuda::CudaDevice& device,
                                   std::string name, std::chrono::milliseconds timeout)
    : comm_(comm), rank_(rank), size_(size), device_(device), name_(std::move(name)), timeout_(timeout) {
  // [0] barrier value; [1, 2] outgoing p2p header; [3, 4] incoming p2p header.
  scratch_ = device_.allocate(5, kernels::DType::kI32);
}

// ncclCommFinalize waits until every member has finalized ("globally quiescent"), which
// would stall members destroyed one after another on one thread; ncclCommAbort frees
// the local resources without waiting for peers. Callers make a healthy group
// quiescent first (its last collective waited for everywhere, e.g. a barrier).
NcclCommunicator::~NcclCommunicator() {
  std::lock_guard lock(mu_);
  if (!comm_) return;
  cudaSetDevice(device_.ordinal());
  cudaStreamSynchronize(device_.stream(Stream::kComm));
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

std::string NcclCommunicator::where(const char* op) const {
  return member(name_, rank_, size_) + ", " + op;
}

void NcclCommunicator::mark_aborted(const std::string& why) {
  std::lock_guard lock(reason_mu_);
  if (!aborted_.exchange(true)) abort_reason_ = why;
}

std::string NcclCommunicator::abort_reason() const {
  std::lock_guard lock(reason_mu_);
  return abort_reason_;
}

void NcclCommunicator::fail(const char* op, const std::string& cause) {
  mark_aborted(std::string(op) + ": " + cause);
  std::lock_guard lock(mu_);
  if (comm_) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  throw CommError(where(op) + ": " + cause + " (communicator aborted)");
}

void NcclCommunicator::abort(const std::string& why) {
  mark_aborted(why);
  // Whoever holds mu_ longer than this is inside launch(): it polls aborted_ and aborts
  // comm_ itself on its way out, so the caller (a supervisor's thread) never waits for a
  // collective stuck on a dead peer.
  std::unique_lock lock(mu_, std::chrono::milliseconds(200));
  if (!lock.owns_lock()) return;
  if (comm_) {
    cudaSetDevice(device_.ordinal());
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

template <class Enqueue>
Event NcclCommunicator::launch(const char* op, Enqueue&& enqueue, Stream stream) {
  std::string cause;
  {
    std::lock_guard lock(mu_);
    if (aborted_ || !comm_) throw CommError(where(op) + ": aborted: " + abort_reason());
    set_device(device_.ordinal());
    // The collective reads what the compute stream has produced so far.
    if (stream != Stream::kCompute) device_.wait_event(stream, device_.record_event(Stream::kCompute));
    ncclResult_t r = enqueue(comm_, device_.stream(stream));
    if (r == ncclInProgress) r = settle(comm_, Clock::now() + timeout_, &aborted_);
    if (r == ncclSuccess && !aborted_) return device_.record_event(stream);
    if (aborted_) cause = "aborted while enqueueing: " + abort_reason();
    else
      cause = r == ncclInProgress ? "enqueueing did not finish within " + std::to_string(timeout_.count()) + " ms"
                                  : nccl_error(r, comm_);
  }
  fail(op, cause);
}

void NcclCommunicator::wait(const Event& e, const char* op) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    bool done = false;
    try {
      done = e.done();
    } catch (const std::exception& ex) {
      fail(op, ex.what());
    }
    if (done) return;
    std::string cause;
    {
      std::lock_guard lock(mu_);
      if (aborted_ || !comm_) throw CommError(where(op) + ": aborted: " + abort_reason());
      ncclResult_t st = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) cause = nccl_error(q, comm_);
      else if (st != ncclSuccess && st != ncclInProgress) cause = nccl_error(st, comm_);
    }
    if (cause.empty() && Clock::now() > deadline)
      cause = "timed out after " + std::to_string(timeout_.count()) + " ms (a member missing or dead?)";
    if (!cause.empty()) fail(op, cause);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// ---- collectives ------------------------------------------------------------------

Event NcclCommunicator::all_reduce_sum_async(std::span<float> data) {
  return launch("all_reduce_sum", [&](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, c, s);
  });
}

Event NcclCommunicator::reduce_scatter_sum_async(std::span<const float> in, std::span<float> out) {
  const size_t n = in.size();
  const Chunk mine = chunk_range(n, size_, rank_);
  if (out.size() != mine.size())
    throw CommError(where("reduce_scatter_sum") + ": " + std::to_string(n) + " elements give this rank a chunk of " +
                    std::to_string(mine.size()) + ", but its output holds " + std::to_string(out.size()));
  return launch("reduce_scatter_sum", [&](ncclComm_t c, cudaStream_t s) {
    if (n % size_t(size_) == 0) return ncclReduceScatter(in.data(), out.data(), out.size(), ncclFloat, ncclSum, c, s);
    // Uneven chunks: one reduce per chunk onto its owner, in one NCCL group.
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < size_ && r == ncclSuccess; ++q) {
      const Chunk ch = chunk_range(n, size_, q);
      if (ch.size() == 0) continue;
      r = ncclReduce(in.data() + ch.begin, q == rank_ ? out.data() : const_cast<float*>(in.data() + ch.begin),
                     ch.size(), ncclFloat, ncclSum, q, c, s);
    }
    const ncclResult_t g = ncclGroupEnd();
    return r != ncclSuccess ? r : g;
  });
}

Event NcclCommunicator::all_gather_async(std::span<const float> in, std::span<float> out) {
  const size_t n = out.size();
  const Chunk mine = chunk_range(n, size_, rank_);
  if (in.size() != mine.size())
    throw CommError(where("all_gather") + ": gathering " + std::to_string(n) + " elements expects this rank's chunk of " +
                    std::to_string(mine.size()) + ", got " + std::to_string(in.size()));
  return launch("all_gather", [&](ncclComm_t c, cudaStream_t s) {
    if (n % size_t(size_) == 0) return ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, c, s);
    // Uneven chunks: every owner broadcasts its chunk into place, in one NCCL group.
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < size_ && r == ncclSuccess; ++q) {
      const Chunk ch = chunk_range(n, size_, q);
      if (ch.size() == 0) continue;
      r = ncclBroadcast(q == rank_ ? static_cast<const void*>(in.data()) : static_cast<const void*>(out.data() + ch.begin),
                        out.data() + ch.begin, ch.size(), ncclFloat, q, c, s);
    }
    const ncclResult_t g = ncclGroupEnd();
    return r != ncclSuccess ? r : g;
  });
}

void NcclCommunicator::issue_all_reduce_sum(std::span<float> data) {
  device_.wait_event(Stream::kCompute, all_reduce_sum_async(data));
}

void NcclCommunicator::issue_reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  device_.wait_event(Stream::kCompute, reduce_scatter_sum_async(in, out));
}

void NcclCommunicator::issue_all_gather(std::span<const float> in, std::span<float> out) {
  device_.wait_event(Stream::kCompute, all_gather_async(in, out));
}

void NcclCommunicator::issue_reduce_scatter_sum_part(std::span<float> all, size_t begin, size_t end) {
  if (begin > end || end > all.size())
    throw CommError(where("reduce_scatter_sum_part") + ": part [" + std::to_string(begin) + ", " +
                    std::to_string(end) + ") outside " + std::to_string(all.size()) + " elements");
  if (begin == end) return;
  launch("reduce_scatter_sum_part", [&](ncclComm_t c, cudaStream_t s) {
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < size_ && r == ncclSuccess; ++q) {
      const Chunk ch = chunk_range(all.size(), size_, q);
      const size_t lo = std::max(begin, ch.begin), hi = std::min(end, ch.end);
      if (lo >= hi) continue;
      r = ncclReduce(all.data() + lo, all.data() + lo, hi - lo, ncclFloat, ncclSum, q, c, s);
    }
    const ncclResult_t g = ncclGroupEnd();
    return r != ncclSuccess ? r : g;
  });
}

void NcclCommunicator::device_waits_for_issued() {
  std::lock_guard lock(mu_);
  if (aborted_ || !comm_) throw CommError(where("device_waits_for_issued") + ": aborted: " + abort_reason());
  device_.wait_event(Stream::kCompute, device_.record_event(Stream::kComm));
}

void NcclCommunicator::all_reduce_sum(std::span<float> data) { wait(all_reduce_sum_async(data), "all_reduce_sum"); }

void NcclCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  wait(reduce_scatter_sum_async(in, out), "reduce_scatter_sum");
}

void NcclCommunicator::all_gather(std::span<const float> in, std::span<float> out) {
  wait(all_gather_async(in, out), "all_gather");
}

void NcclCommunicator::broadcast(std::span<float> data, int root) {
  if (root < 0 || root >= size_)
    throw CommError(where("broadcast") + ": root " + std::to_string(root) + " outside 0.." + std::to_string(size_ - 1));
  wait(launch("broadcast", [&](ncclComm_t c, cudaStream_t s) {
         return ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, c, s);
       }),
       "broadcast");
}

void NcclCommunicator::barrier() {
  int32_t* v = scratch_.i32();
  wait(launch("barrier", [&](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(v, v, 1, ncclInt32, ncclSum, c, s); }),
       "barrier");
}

void NcclCommunicator::check_peer(const char* op, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw CommError(where(op) + ": no peer " + std::to_string(peer) + " in a group of " + std::to_string(size_));
}

void NcclCommunicator::issue_send(std::span<const float> data, int peer, int) {
  check_peer("issue_send", peer);
  launch("issue_send", [&](ncclComm_t c, cudaStream_t s) {
    return ncclSend(data.data(), data.size(), ncclFloat, peer, c, s);
  });
}

void NcclCommunicator::issue_recv(std::span<float> data, int peer, int) {
  check_peer("issue_recv", peer);
  launch(
      "issue_recv",
      [&](ncclComm_t c, cudaStream_t s) { return ncclRecv(data.data(), data.size(), ncclFloat, peer, c, s); },
      Stream::kCompute);
}

void NcclCommunicator::send(std::span<const float> data, int peer, int tag) {
  check_peer("send", peer);
  if (data.size() > size_t(INT32_MAX)) throw CommError(where("send") + ": message above 2^31 elements");
  const int32_t header[2] = {tag, int32_t(data.size())};
  int32_t* h = scratch_.i32() + 1;
  wait(launch("send",
              [&](ncclComm_t c, cudaStream_t s) {
                // Pageable source: the copy is staged before cudaMemcpyAsync returns.
                if (cudaMemcpyAsync(h, header, sizeof(header), cudaMemcpyHostToDevice, s) != cudaSuccess)
                  return ncclUnhandledCudaError;
                ncclResult_t r = ncclGroupStart();
                if (r == ncclSuccess) r = ncclSend(h, 2, ncclInt32, peer, c, s);
                if (r == ncclSuccess) r = ncclSend(data.data(), data.size(), ncclFloat, peer, c, s);
                const ncclResult_t g = ncclGroupEnd();
                return r != ncclSuccess ? r : g;
              }),
       "send");
}

void NcclCommunicator::recv(std::span<float> data, int peer, int tag) {
  check_peer("recv", peer);
  int32_t* h = scratch_.i32() + 3;
  wait(launch("recv",
              [&](ncclComm_t c, cudaStream_t s) {
                ncclResult_t r = ncclGroupStart();
                if (r == ncclSuccess) r = ncclRecv(h, 2, ncclInt32, peer, c, s);
                if (r == ncclSuccess) r = ncclRecv(data.data(), data.size(), ncclFloat, peer, c, s);
                const ncclResult_t g = ncclGroupEnd();
                return r != ncclSuccess ? r : g;
              }),
       "recv");
  int32_t got[2] = {0, 0};
  TROUPE_CUDA_CHECK(cudaMemcpy(got, h, sizeof(got), cudaMemcpyDeviceToHost));
  if (got[0] != tag || size_t(got[1]) != data.size())
    throw CommError(where("recv") + ": expected tag " + std::to_string(tag) + " with " + std::to_string(data.size()) +
                    " floats from rank " + std::to_string(peer) + ", got tag " + std::to_string(got[0]) + " with " +
                    std::to_string(got[1]));
}

}  // namespace troupe::comm
