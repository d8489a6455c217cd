// In-process communicators: exact results of every collective, rank-order
// determinism, and failures that raise instead of hanging.
#include <doctest/doctest.h>

#include <functional>
#include <thread>

#include "comm/inprocess.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// Runs fn(rank, comm) on one thread per member; rethrows the first failure.
void run_group(int n, const std::function<void(int, comm::Communicator&)>& fn,
               std::chrono::milliseconds timeout = 5000ms) {
  auto members = comm::make_inprocess_group(n, "test", timeout);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, *members[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("all_reduce_sum gives every rank the exact sum, repeatedly") {
  for (int n : {1, 2, 3, 4}) {
    run_group(n, [n](int r, comm::Communicator& c) {
      for (int iter = 0; iter < 20; ++iter) {
        std::vector<float> v(1001);
        for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 97) + float(r) + iter;
        c.all_reduce_sum(v);
        for (size_t i = 0; i < v.size(); ++i)
          REQUIRE(v[i] == float(n * (i % 97) + n * (n - 1) / 2 + n * iter));
      }
    });
  }
}

TEST_CASE("all_reduce_sum adds in rank order, so every rank holds the same bits") {
  // 1e8 + 1 - 1e8 differs by order in fp32; rank order (0,1,2) gives (1e8+1)-1e8 = 0.
  std::vector<std::vector<float>> result(3);
  run_group(3, [&](int r, comm::Communicator& c) {
    const float vals[] = {1e8f, 1.0f, -1e8f};
    std::vector<float> v(5, vals[r]);
    c.all_reduce_sum(v);
    result[r] = v;
  });
  for (int r = 0; r < 3; ++r)
    for (float x : result[r]) CHECK(x == (1e8f + 1.0f) - 1e8f);
}

TEST_CASE("reduce_scatter_sum and all_gather round trip, with uneven chunks") {
  const int n = 4;
  for (size_t total : {size_t(4 * 257), size_t(1031), size_t(3)}) {
    CAPTURE(total);
    run_group(n, [&](int r, comm::Communicator& c) {
      const auto mine = comm::chunk_range(total, n, r);
      std::vector<float> in(total), part(mine.size()), full(total);
      for (size_t i = 0; i < in.size(); ++i) in[i] = float(i) * (r + 1);
      c.reduce_scatter_sum(in, part);
      for (size_t i = 0; i < part.size(); ++i) REQUIRE(part[i] == float(mine.begin + i) * (1 + 2 + 3 + 4));
      c.all_gather(part, full);
      for (size_t i = 0; i < full.size(); ++i) REQUIRE(full[i] == float(i) * 10);
      // In place: the output is this rank's own chunk of the input.
      std::vector<float> self_in(in);
      c.reduce_scatter_sum(self_in, std::span<float>(self_in.data() + mine.begin, mine.size()));
      for (size_t i = 0; i < mine.size(); ++i) REQUIRE(self_in[mine.begin + i] == part[i]);
      // In place: this rank's input is its own chunk of the output.
      std::vector<float> inplace(total, -1.0f);
      for (size_t i = mine.begin; i < mine.end; ++i) inplace[i] = float(r);
      c.all_gather(std::span<const float>(inplace.data() + mine.begin, mine.size()), inplace);
      for (int q = 0; q < n; ++q) {
        const auto cq = comm::chunk_range(total, n, q);
        for (size_t i = cq.begin; i < cq.end; ++i) REQUIRE(inplace[i] == float(q));
      }
    });
  }
}

TEST_CASE("chunk ranges cover every element once") {
  for (size_t total : {0, 1, 5, 64, 1001})
    for (int parts : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int r = 0; r < parts; ++r) {
        auto c = comm::chunk_range(total, parts, r);
        CHECK(c.begin == next);
        next = c.end;
      }
      CHECK(next == total);
    }
}

TEST_CASE("broadcast, barrier and send/recv") {
  run_group(3, [](int r, comm::Communicator& c) {
    std::vector<float> v(10, float(r));
    c.broadcast(v, 2);
    for (float x : v) REQUIRE(x == 2.0f);
    c.barrier();
    std::vector<float> msg(4, float(r)), got(4);
    const int next = (r + 1) % 3, prev = (r + 2) % 3;
    c.send(msg, next, 7);
    c.recv(got, prev, 7);
    for (float x : got) REQUIRE(x == float(prev));
  });
}

TEST_CASE("mismatched collectives raise CommError on every member") {
  CHECK_THROWS_WITH_AS(run_group(2,
                                 [](int r, comm::Communicator& c) {
                                   std::vector<float> v(r == 0 ? 8 : 16);
                                   c.all_reduce_sum(v);
                                 }),
                       doctest::Contains("rank 1 called all_reduce_sum(in=16"), comm::CommError);
}

TEST_CASE("a missing member times out instead of hanging, and abort releases waiters") {
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(run_group(2,
                                 [](int r, comm::Communicator& c) {
                                   if (r == 0) c.barrier();
                                 },
                                 200ms),
                       doctest::Contains("timed out after 200 ms in barrier"), comm::CommError);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);

  auto members = comm::make_inprocess_group(2, "dp[pp0/tp0]", 60000ms);
  std::thread waiter([&] {
    std::vector<float> v(4);
    CHECK_THROWS_WITH_AS(members[0]->all_reduce_sum(v), doctest::Contains("aborted: rank 1 died"),
                         comm::CommError);
  });
  std::this_thread::sleep_for(50ms);
  members[1]->abort("rank 1 died");
  waiter.join();
}
