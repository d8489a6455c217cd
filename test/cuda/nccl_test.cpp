// NCCL communicators (comm/nccl): the unique-ID handoff, the collectives against
// their definitions in comm/communicator.h, creation timeouts and aborts.
// NCCL allows one rank per GPU, so groups of two or more need as many GPUs; with
// fewer, those cases report themselves skipped. Values are small integers, so every
// sum is exact whatever order NCCL adds in, and results are compared exactly.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/nccl/nccl_communicator.h"
#include "test/cuda/cuda_test_util.h"

using namespace troupe;
using namespace troupe::testing;
using kernels::cuda::CudaDevice;
using kernels::cuda::CudaDeviceOptions;

namespace {

void loopback_only() { setenv("NCCL_SOCKET_IFNAME", "lo", 0); }

std::vector<float> iota_values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + float(i % 1000);
  return v;
}

// A device on GPU 0 and one on GPU 1: gpus[r] is rank r's.
struct TwoGpus {
  static CudaDeviceOptions second() {
    CudaDeviceOptions o;
    o.device = 1;
    return o;
  }
  CudaDevice d0, d1{second()};
  CudaDevice& operator[](int r) { return r == 0 ? d0 : d1; }
};

// Runs body(rank) on one thread per rank and rethrows the first failure.
template <class F>
void on_threads(int n, F&& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("NCCL unique IDs travel as hex text (no GPU needed)") {
  loopback_only();
  const comm::NcclId id = comm::nccl_unique_id();
  const std::string hex = comm::nccl_id_to_hex(id);
  CHECK(hex.size() == 256);
  CHECK(comm::nccl_id_from_hex(hex) == id);
  CHECK(comm::nccl_unique_id() != id);
  CHECK_THROWS_WITH_AS(comm::nccl_id_from_hex(hex.substr(1)), doctest::Contains("expected 256 hex digits, got 255"),
                       comm::CommError);
  std::string bad = hex;
  bad[17] = 'g';
  CHECK_THROWS_WITH_AS(comm::nccl_id_from_hex(bad), doctest::Contains("at offset 17"), comm::CommError);
  CHECK(comm::nccl_version().rfind("NCCL 2.", 0) == 0);
}

TEST_CASE("a one-member NCCL group runs every collective on one GPU") {
  REQUIRE_GPU();
  loopback_only();
  CudaDevice dev;
  auto group = comm::make_nccl_group({&dev}, "dp[one]");
  REQUIRE(group.size() == 1);
  auto& c = *group[0];
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  const auto x = iota_values(1001, 1.0f);
  auto buf = upload(dev, x);
  c.all_reduce_sum({buf.f32(), x.size()});
  CHECK(download(dev, buf.f32(), x.size()) == x);
  auto out = poisoned(dev, x.size());
  c.reduce_scatter_sum({buf.f32(), x.size()}, {out.f32(), x.size()});
  CHECK(download(dev, out.f32(), x.size()) == x);
  auto gathered = poisoned(dev, x.size());
  c.all_gather({out.f32(), x.size()}, {gathered.f32(), x.size()});
  CHECK(download(dev, gathered.f32(), x.size()) == x);
  c.broadcast({buf.f32(), x.size()}, 0);
  c.barrier();
  // Asynchronous form: the compute stream waits for the collective on the device.
  auto e = c.all_reduce_sum_async({buf.f32(), x.size()});
  dev.wait_event(kernels::cuda::Stream::kCompute, e);
  dev.scale(buf.f32(), int64_t(x.size()), 2.0f);
  c.wait(e, "all_reduce_sum");
  auto twice = x;
  for (auto& v : twice) v *= 2.0f;
  CHECK(download(dev, buf.f32(), x.size()) == twice);
  CHECK_THROWS_WITH_AS(c.reduce_scatter_sum({buf.f32(), x.size()}, {out.f32(), 5}),
                       doctest::Contains("dp[one]: rank 0 of 1, reduce_scatter_sum"), comm::CommError);

  c.abort("stage dp0 died");
  CHECK(c.aborted());
  CHECK_THROWS_WITH_AS(c.all_reduce_sum({buf.f32(), x.size()}), doctest::Contains("aborted: stage dp0 died"),
                       comm::CommError);
}

TEST_CASE("creating a communicator whose other member never joins times out with a clear error") {
  REQUIRE_GPU();
  loopback_only();
  CudaDevice dev;
  const comm::NcclId id = comm::nccl_unique_id();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(comm::make_nccl_communicator(id, 0, 2, dev, "dp[pp0/tp0]", std::chrono::milliseconds(3000)),
                       doctest::Contains("dp[pp0/tp0]: rank 0 of 2: creating the NCCL communicator failed: not every "
                                         "member joined within 3000 ms"),
                       comm::CommError);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s >= 2.9);
  CHECK(s < 60.0);
  CHECK_THROWS_WITH_AS(comm::make_nccl_communicator(id, 2, 2, dev, "dp[x]"), doctest::Contains("outside a group of 2"),
                       comm::CommError);
}

TEST_CASE("an in-process group of two GPUs: collectives with even and uneven chunks, in place, p2p") {
  if (!gpus_or_skip(2)) return;
  loopback_only();
  TwoGpus gpus;
  auto group = comm::make_nccl_group({&gpus.d0, &gpus.d1}, "dp[two]");
  for (size_t n : {size_t(1000), size_t(1001)}) {
    CAPTURE(n);
    on_threads(2, [&](int r) {
      CudaDevice& dev = gpus[r];
      auto& c = *group[size_t(r)];
      const auto mine = iota_values(n, float(r + 1) * 1000.0f);
      const auto other = iota_values(n, float(2 - r) * 1000.0f);
      std::vector<float> sum(n);
      for (size_t i = 0; i < n; ++i) sum[i] = mine[i] + other[i];
      auto buf = upload(dev, mine);
      c.all_reduce_sum({buf.f32(), n});
      CHECK(download(dev, buf.f32(), n) == sum);
      // Reduce-scatter in place: rank r's chunk of its own input receives the sum.
      auto rs = upload(dev, mine);
      const comm::Chunk ch = comm::chunk_range(n, 2, r);
      c.reduce_scatter_sum({rs.f32(), n}, {rs.f32() + ch.begin, ch.size()});
      const auto got = download(dev, rs.f32() + ch.begin, ch.size());
      CHECK(got == std::vector<float>(sum.begin() + ch.begin, sum.begin() + ch.end));
      // All-gather in place puts every chunk back everywhere.
      c.all_gather({rs.f32() + ch.begin, ch.size()}, {rs.f32(), n});
      CHECK(download(dev, rs.f32(), n) == sum);
      auto bc = upload(dev, mine);
      c.broadcast({bc.f32(), n}, 1);
      CHECK(download(dev, bc.f32(), n) == (r == 1 ? mine : other));
      c.barrier();
      // Point to point, with the tag checked on arrival.
      auto p2p = poisoned(dev, n);
      if (r == 0) {
        c.send({buf.f32(), n}, 1, 7);
      } else {
        c.recv({p2p.f32(), n}, 0, 7);
        CHECK(download(dev, p2p.f32(), n) == sum);
      }
    });
  }
  // A tag mismatch is reported by the receiver.
  on_threads(2, [&](int r) {
    CudaDevice& dev = gpus[r];
    auto buf = upload(dev, iota_values(64, 1.0f));
    if (r == 0)
      group[0]->send({buf.f32(), 64}, 1, 3);
    else
      CHECK_THROWS_WITH_AS(group[1]->recv({buf.f32(), 64}, 0, 4), doctest::Contains("expected tag 4 with 64 floats from rank 0, got tag 3"),
                           comm::CommError);
  });
}

TEST_CASE("members created from a handed-out unique ID (the cross-process path) on two GPUs") {
  if (!gpus_or_skip(2)) return;
  loopback_only();
  const std::string hex = comm::nccl_id_to_hex(comm::nccl_unique_id());  // what the supervisor sends
  TwoGpus gpus;
  std::shared_ptr<comm::NcclCommunicator> members[2];
  on_threads(2, [&](int r) {
    members[r] = comm::make_nccl_communicator(comm::nccl_id_from_hex(hex), r, 2, gpus[r], "tp[pp0]");
  });
  on_threads(2, [&](int r) {
    CudaDevice& dev = gpus[r];
    auto buf = upload(dev, std::vector<float>(77, float(r + 1)));
    members[r]->all_reduce_sum({buf.f32(), 77});
    CHECK(download(dev, buf.f32(), 77) == std::vector<float>(77, 3.0f));
  });
}

TEST_CASE("abort from another thread returns at once, while a collective waits for a member that never comes") {
  if (!gpus_or_skip(2)) return;
  loopback_only();
  TwoGpus gpus;
  auto group = comm::make_nccl_group({&gpus.d0, &gpus.d1}, "dp[stuck]");
  auto buf = upload(gpus.d0, iota_values(64, 1.0f));
  // Member 0 all-reduces; member 1 (a dead peer) never does.
  std::string error;
  std::thread caller([&] {
    try {
      group[0]->all_reduce_sum({buf.f32(), 64});
      error = "returned";
    } catch (const comm::CommError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // What the supervisor does: abort from its own thread, which must not wait for the
  // stuck collective (the emulated NCCL runs it on the caller's thread, holding the
  // communicator: abort gives up the lock after 200 ms and leaves the abort to it).
  const auto t0 = std::chrono::steady_clock::now();
  group[0]->abort("its peer died");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 2.0);
  CHECK(group[0]->aborted());
  group[1]->abort("dead");  // the dead peer's side goes too (the emulated call then returns)
  caller.join();
  CHECK(error.find("dp[stuck]: rank 0 of 2") != std::string::npos);
  CHECK(error.find("its peer died") != std::string::npos);
}
