// NCCL communicators: comm::Communicator over GPUs. Every span passed to a
// collective is device memory of the communicator's CudaDevice.
//
// Creation:
//   - across processes: the supervisor calls nccl_unique_id() once per group (no GPU
//     needed), hands the ID to every member (nccl_id_to_hex / nccl_id_from_hex carry
//     it in a message or on a command line), and each member calls
//     make_nccl_communicator(id, rank, size, device, ...);
//   - inside one process, several GPUs: make_nccl_group(devices, ...) creates all
//     members at once (one unique ID, ncclCommInitRankConfig per device inside one
//     NCCL group). NCCL allows one rank per GPU per communicator, so two stage actors
//     sharing one GPU use in-process communicators (comm/inprocess.h) instead.
//
// Streams: a collective runs on the device's communication stream, after every
// kernel issued so far on its compute stream (an event orders them on the device).
// The blocking calls of the Communicator interface then wait for completion by
// polling, never inside NCCL: the wait checks ncclCommGetAsyncError, the abort flag
// and the timeout. The *_async forms return an Event instead, for overlapping
// gradient buckets with backward: keep the buffers alive, and make the compute
// stream wait (device.wait_event(Stream::kCompute, e)) before touching the output;
// wait(e) surfaces errors and timeouts.
//
// Failure: communicators are non-blocking (ncclConfig_t.blocking = 0). On an NCCL
// error, a timeout (creation included) or abort(why), the communicator calls
// ncclCommAbort and every later call throws CommError naming the group, rank, call and
// cause; the supervisor then rebuilds the group with a fresh unique ID. NCCL has no
// cross-process abort: the other members notice through their own timeout (or the
// supervisor stops them).
//
// Destruction aborts the communicator (local, never waits for peers, as PyTorch's
// process groups do): destroy a healthy group once its last collective has completed on
// every member (a barrier()).
//
// Order of summation: NCCL's (ring or tree, fixed for a given size, rank count and
// topology), not rank order as in comm/inprocess.h: the result is deterministic run to
// run on the same machine but not bitwise equal to the in-process communicator's.
// send/recv carry a small header (tag, element count) in the same NCCL group as the
// data, and the receiver checks it against its own tag and size.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/gpu_backend.h"

struct ncclComm;

namespace troupe::comm {

using NcclId = std::array<char, 128>;  // NCCL_UNIQUE_ID_BYTES

// A fresh group ID (ncclGetUniqueId; works without a GPU).
NcclId nccl_unique_id();
std::string nccl_id_to_hex(const NcclId& id);
// Throws CommError naming the offset of the first bad character or the wrong length.
NcclId nccl_id_from_hex(std::string_view hex);
// "NCCL 2.28.9" (the library's version; no GPU needed).
std::string nccl_version();

class NcclCommunicator final : public Communicator {
 public:
  // Use make_nccl_communicator / make_nccl_group.
  NcclCommunicator(ncclComm* comm, int rank, int size, kernels::cuda::CudaDevice& device,
                   std::string name, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  kernels::cuda::CudaDevice& device() { return device_; }

  void all_reduce_sum(std::span<float> data) override;
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const float> in, std::span<float> out) override;
  void broadcast(std::span<float> data, int root) override;
  void barrier() override;
  void send(std::span<const float> data, int peer, int tag) override;
  void recv(std::span<float> data, int peer, int tag) override;
  void abort(const std::string& why) override;

  // Device memory: the issue forms launch the collective and make the compute stream
  // wait for it (NCCL errors then surface through a stalled stream, i.e. the step
  // watchdog, and abort() unblocks it).
  bool on_device() const override { return true; }
  void issue_all_reduce_sum(std::span<float> data) override;
  void issue_reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void issue_all_gather(std::span<const float> in, std::span<float> out) override;
  // One ncclReduce per owner whose chunk meets the part, in one NCCL group.
  void issue_reduce_scatter_sum_part(std::span<float> all, size_t begin, size_t end) override;
  void device_waits_for_issued() override;
  // The send on the communication stream (after the compute stream's work so far; the
  // compute stream does not wait for it); the receive on the compute stream itself, so
  // later kernels wait for it. No header travels (unlike send/recv).
  void issue_send(std::span<const float> data, int peer, int tag) override;
  void issue_recv(std::span<float> data, int peer, int tag) override;

  kernels::cuda::Event all_reduce_sum_async(std::span<float> data);
  kernels::cuda::Event reduce_scatter_sum_async(std::span<const float> in, std::span<float> out);
  kernels::cuda::Event all_gather_async(std::span<const float> in, std::span<float> out);
  // Blocks until e (from this communicator) is reached; throws CommError on an NCCL
  // error, abort or timeout (the communicator is then aborted).
  void wait(const kernels::cuda::Event& e, const char* op);

  bool aborted() const { return aborted_.load(); }
  // Keeps `owner` (e.g. the device's handle) alive as long as this communicator.
  void hold(std::shared_ptr<const void> owner) { held_ = std::move(owner); }

 private:
  // Enqueues on `stream` (the communication stream after the compute stream's work so
  // far, or the compute stream itself) and returns the event after it.
  template <class Enqueue>
  kernels::cuda::Event launch(const char* op, Enqueue&& enqueue,
                              kernels::cuda::Stream stream = kernels::cuda::Stream::kComm);
  void check_peer(const char* op, int peer) const;
  [[noreturn]] void fail(const char* op, const std::string& cause);
  std::string where(const char* op) const;
  // Sets aborted_ with `why` as the reason, unless aborted before.
  void mark_aborted(const std::string& why);
  std::string abort_reason() const;

  std::shared_ptr<const void> held_;  // declared first: outlives everything below
  // Guards comm_: one NCCL call on it at a time, and ncclCommAbort never concurrent with
  // one. abort() waits for it only briefly: a call in progress that enqueues (and polls)
  // sees aborted_ and aborts comm_ itself.
  std::timed_mutex mu_;
  ncclComm* comm_;
  const int rank_, size_;
  kernels::cuda::CudaDevice& device_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mu_;
  std::string abort_reason_;  // guarded by reason_mu_
  kernels::Buffer scratch_;  // barrier value and the p2p header (int32 tag, count)
};

std::shared_ptr<NcclCommunicator> make_nccl_communicator(
    const NcclId& id, int rank, int size, kernels::cuda::CudaDevice& device, std::string name,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));

// kernels::DeviceGroups::make over NCCL: make_nccl_group on the devices (CudaDevices
// on distinct GPUs; each member keeps its device alive).
kernels::DeviceGroups::MakeGroup nccl_group_maker();
// All of kernels::DeviceGroups over NCCL: make as above; new_id is
// nccl_id_to_hex(nccl_unique_id()); join is make_nccl_communicator from such an ID on
// a CudaDevice (kept alive by the member).
kernels::DeviceGroups nccl_groups();

// Pipeline neighbours across processes: member 0 (stage p) and member 1 (stage p+1) of
// two NCCL communicators over the same pair, one per direction. NCCL runs one
// communicator's operations in issue order, so with one communicator for both
// directions stage p's send of microbatch m+1 could wait for stage p+1's receive of it,
// queued behind stage p+1's send of a gradient that waits for stage p's receive, queued
// behind that send (1F1B interleaves them so). With a communicator per direction, each
// carries one FIFO and sends and receives match in issue order. Point-to-point calls
// go to the communicator of their direction; collectives to the forward one.
std::shared_ptr<Communicator> make_nccl_pipeline_pair(std::shared_ptr<NcclCommunicator> forward,
                                                      std::shared_ptr<NcclCommunicator> backward, std::string name);

// Member r runs on devices[r] (distinct GPUs). Members are then used from one thread each.
std::vector<std::shared_ptr<NcclCommunicator>> make_nccl_group(
    const std::vector<kernels::cuda::CudaDevice*>& devices, std::string name,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(120000));

}  // namespace troupe::comm
