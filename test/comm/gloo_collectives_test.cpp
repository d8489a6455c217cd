// Gloo communicators: every collective exact with 2 and 3 members (threads with their
// own Gloo contexts, and separate processes), uneven chunks, in-place use, point to
// point, and bitwise parity with the in-process communicator.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "comm/gloo_communicator.h"
#include "comm/inprocess.h"
#include "test/comm/gloo_test_util.h"

using namespace troupe;
using namespace gloo_test;

namespace {

// Exercises every collective on `c` and checks each element exactly. Used by the thread
// and the process tests. Returns the number of wrong elements (0 when all is well).
size_t exercise(int r, comm::Communicator& c) {
  const int n = c.size();
  size_t wrong = 0;
  auto expect = [&](bool ok) { wrong += ok ? 0 : 1; };
  for (size_t total : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(1001), size_t(3 * 4099 + 1)}) {
    for (int iter = 0; iter < 2; ++iter) {
      std::vector<float> v(total);
      for (size_t i = 0; i < total; ++i) v[i] = value(i, r, iter);
      c.all_reduce_sum(v);
      for (size_t i = 0; i < total; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += value(i, q, iter);
        expect(v[i] == want);
      }
    }
    // reduce-scatter into a separate buffer and in place, then all-gather back.
    const auto mine = comm::chunk_range(total, n, r);
    std::vector<float> in(total), part(mine.size()), full(total, -1.0f);
    for (size_t i = 0; i < total; ++i) in[i] = float(i % 1000) * float(r + 1);
    c.reduce_scatter_sum(in, part);
    const float ranks_sum = float(n * (n + 1) / 2);
    for (size_t i = 0; i < part.size(); ++i) expect(part[i] == float((mine.begin + i) % 1000) * ranks_sum);
    std::vector<float> self(in);
    c.reduce_scatter_sum(self, std::span<float>(self.data() + mine.begin, mine.size()));
    for (size_t i = 0; i < mine.size(); ++i) expect(self[mine.begin + i] == part[i]);
    c.all_gather(part, full);
    for (size_t i = 0; i < total; ++i) expect(full[i] == float(i % 1000) * ranks_sum);
    std::vector<float> inplace(total, -1.0f);
    for (size_t i = mine.begin; i < mine.end; ++i) inplace[i] = float(r);
    c.all_gather(std::span<const float>(inplace.data() + mine.begin, mine.size()), inplace);
    for (int q = 0; q < n; ++q) {
      const auto cq = comm::chunk_range(total, n, q);
      for (size_t i = cq.begin; i < cq.end; ++i) expect(inplace[i] == float(q));
    }
  }
  for (int root = 0; root < n; ++root) {
    std::vector<float> b(777, float(r * 10 + 1));
    c.broadcast(b, root);
    for (float x : b) expect(x == float(root * 10 + 1));
  }
  c.barrier();
  // Point to point around the ring, several messages on one tag (they keep their
  // order) and a second tag interleaved.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (n > 1) {
    for (int k = 0; k < 3; ++k) {
      std::vector<float> msg(100 + k, float(r * 100 + k));
      c.send(msg, next, 5);
      c.send(std::vector<float>{float(k)}, next, 6);
    }
    c.send({}, next, 7);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> got(100 + k), one(1);
      c.recv(got, prev, 5);
      for (float x : got) expect(x == float(prev * 100 + k));
      c.recv(one, prev, 6);
      expect(one[0] == float(k));
    }
    c.recv({}, prev, 7);
  }
  c.barrier();
  return wrong;
}

}  // namespace

TEST_CASE("every collective is exact with 2 and 3 members (threads, own Gloo contexts)") {
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    std::vector<size_t> wrong(n);
    run_threads(n, "dp[pp0/tp0]", [&](int r, comm::Communicator& c) {
      CHECK(c.rank() == r);
      CHECK(c.size() == n);
      CHECK(c.name() == "dp[pp0/tp0]");
      wrong[r] = exercise(r, c);
    });
    for (int r = 0; r < n; ++r) CHECK(wrong[r] == 0);
  }
}

TEST_CASE("segmented reduce-scatter: many small segments, two in flight, uneven chunks") {
  auto opt = options();
  opt.segment_bytes = 64;  // 16 floats: chunks of 1000+ elements arrive in 60+ segments
  for (int n : {2, 3}) {
    run_threads(
        n, "tp[dp0/pp0]",
        [&](int r, comm::Communicator& c) {
          for (size_t total : {size_t(5), size_t(47), size_t(3001)}) {
            std::vector<float> v(total);
            for (size_t i = 0; i < total; ++i) v[i] = value(i, r);
            c.all_reduce_sum(v);
            for (size_t i = 0; i < total; ++i) {
              float want = 0;
              for (int q = 0; q < n; ++q) want += value(i, q);
              REQUIRE(v[i] == want);
            }
          }
        },
        opt);
  }
}

TEST_CASE("rank-order results are bitwise identical to the in-process communicator") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    // Values of mixed magnitude and sign: their sums depend on the order of addition.
    const size_t total = 20011;
    std::vector<std::vector<float>> inputs(n, std::vector<float>(total));
    std::mt19937 gen(1234 + n);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-20, 20);
    for (auto& v : inputs)
      for (auto& x : v) x = std::ldexp(mant(gen), expo(gen));

    auto run = [&](auto&& make_and_run) {
      std::vector<std::vector<float>> ar(n), rs(n);
      make_and_run([&](int r, comm::Communicator& c) {
        ar[r] = inputs[r];
        c.all_reduce_sum(ar[r]);
        rs[r].resize(comm::chunk_range(total, n, r).size());
        c.reduce_scatter_sum(inputs[r], rs[r]);
      });
      return std::make_pair(ar, rs);
    };
    const auto in_process = run([&](auto&& fn) {
      auto members = comm::make_inprocess_group(n, "ref");
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { fn(r, *members[r]); });
      for (auto& t : ts) t.join();
    });
    auto opt = options();
    opt.segment_bytes = 4096;
    const auto gloo = run([&](auto&& fn) { run_threads(n, "dp", fn, opt); });
    for (int r = 0; r < n; ++r) {
      CHECK(std::memcmp(gloo.first[r].data(), in_process.first[r].data(), total * sizeof(float)) == 0);
      CHECK(std::memcmp(gloo.second[r].data(), in_process.second[r].data(),
                        gloo.second[r].size() * sizeof(float)) == 0);
      // And every member holds the same bits.
      CHECK(std::memcmp(gloo.first[r].data(), gloo.first[0].data(), total * sizeof(float)) == 0);
    }
    // The order matters for these inputs: a reversed-order sum differs somewhere.
    size_t order_sensitive = 0;
    for (size_t i = 0; i < total; ++i) {
      float fwd = inputs[0][i], back = inputs[n - 1][i];
      for (int q = 1; q < n; ++q) fwd += inputs[q][i];
      for (int q = n - 2; q >= 0; --q) back += inputs[q][i];
      order_sensitive += fwd != back;
    }
    if (n == 3) CHECK(order_sensitive > 0);
  }
}

TEST_CASE("Gloo's ring: identical to rank order with 2 members, a different order with 3") {
  // Two members: a + b == b + a exactly, so the ring gives the in-process bits.
  const size_t total = 4099;
  std::vector<std::vector<float>> out(3);
  run_threads(
      2, "ring2",
      [&](int r, comm::Communicator& c) {
        std::vector<float> v(total);
        for (size_t i = 0; i < total; ++i) v[i] = std::ldexp(float(i % 13) - 6.5f, int(i % 17) - 8 + r * 3) / 3.0f;
        std::vector<float> want(v);
        for (size_t i = 0; i < total; ++i) {
          const float other = std::ldexp(float(i % 13) - 6.5f, int(i % 17) - 8 + (1 - r) * 3) / 3.0f;
          want[i] = r == 0 ? v[i] + other : other + v[i];
        }
        c.all_reduce_sum(v);
        CHECK(std::memcmp(v.data(), want.data(), total * sizeof(float)) == 0);
      },
      options(10000ms, comm::GlooReduction::kRing));

  // Three members holding 1e8, 1, -1e8: rank order gives (1e8 + 1) - 1e8 = 0 everywhere;
  // the ring starts each segment's sum at another rank, so some elements come out 1.
  run_threads(
      3, "ring3",
      [&](int r, comm::Communicator& c) {
        const float vals[] = {1e8f, 1.0f, -1e8f};
        std::vector<float> v(300, vals[r]);
        c.all_reduce_sum(v);
        out[r] = v;
      },
      options(10000ms, comm::GlooReduction::kRing));
  size_t zeros = 0, ones = 0;
  for (float x : out[0]) {
    zeros += x == 0.0f;
    ones += x == 1.0f;
  }
  CHECK(zeros + ones == 300);
  CHECK(ones > 0);
  CHECK(out[1] == out[0]);
  CHECK(out[2] == out[0]);
}

TEST_CASE("mismatched calls raise CommError naming both; a wrong recv size keeps the stream in step") {
  std::mutex mu;
  std::vector<std::string> errors;
  CHECK_THROWS_AS(run_threads(2, "dp[pp1/tp0]",
                              [&](int r, comm::Communicator& c) {
                                std::vector<float> v(r == 0 ? 8 : 16);
                                try {
                                  c.all_reduce_sum(v);
                                } catch (const comm::CommError& e) {
                                  std::lock_guard lock(mu);
                                  errors.push_back(e.what());
                                  throw;
                                }
                              }),
                  comm::CommError);
  REQUIRE(!errors.empty());
  bool named = false;
  for (const auto& e : errors)
    named |= e.find("dp[pp1/tp0]: rank ") != std::string::npos &&
             e.find("all_reduce_sum(count=16") != std::string::npos &&
             e.find("all_reduce_sum(count=8") != std::string::npos;
  CHECK(named);

  run_threads(2, "pp[dp0/tp0]:0-1", [&](int r, comm::Communicator& c) {
    if (r == 0) {
      c.send(std::vector<float>(5, 1.0f), 1, 3);
      c.send(std::vector<float>(2, 2.0f), 1, 3);
    } else {
      std::vector<float> wrong_size(4), right(2);
      CHECK_THROWS_WITH_AS(c.recv(wrong_size, 0, 3),
                           doctest::Contains("rank 1 expected 4 floats with tag 3 from rank 0, got 5"),
                           comm::CommError);
      c.recv(right, 0, 3);
      CHECK(right == std::vector<float>{2.0f, 2.0f});
    }
    CHECK_THROWS_WITH_AS(c.send({}, r, 1), doctest::Contains("cannot talk to peer"), comm::CommError);
    CHECK_THROWS_WITH_AS(c.recv({}, 2, 1), doctest::Contains("cannot talk to peer 2"), comm::CommError);
    c.barrier();
  });
}

TEST_CASE("separate processes: every collective exact with 2 and 3 processes (directory store)") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    ScratchDir dir;
    const std::string prefix = fresh_prefix("procs");
    std::vector<pid_t> peers;
    for (int r = 1; r < n; ++r)
      peers.push_back(fork_peer([&, r] {
        comm::DirectoryStore store(dir.path());
        auto c = comm::connect_gloo(store, prefix, "dp[pp0/tp0]", r, n, options());
        return exercise(r, *c) == 0 ? 0 : 1;
      }));
    {
      comm::DirectoryStore store(dir.path());
      auto c = comm::connect_gloo(store, prefix, "dp[pp0/tp0]", 0, n, options());
      CHECK(exercise(0, *c) == 0);
    }
    for (pid_t p : peers) CHECK(wait_peer(p) == 0);
  }
}
