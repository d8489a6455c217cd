// Gloo communicators under failure: a peer killed (SIGKILL) or stopped (SIGSTOP), a
// rendezvous a member never joins, abort(), and rebuilding under a new prefix. Every
// failure is a CommError within the timeout that names the group and the peer.
#include <doctest/doctest.h>

#include <mutex>

#include "comm/gloo_communicator.h"
#include "test/comm/gloo_test_util.h"

using namespace troupe;
using namespace gloo_test;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A peer process that joins `name` as rank `r` of `n` and runs all-reduces until it
// is killed (or its alarm ends it).
pid_t looping_peer(const std::string& dir, const std::string& prefix, const std::string& name, int r, int n) {
  return fork_peer([=] {
    comm::DirectoryStore store(dir);
    auto c = comm::connect_gloo(store, prefix, name, r, n, options(20000ms));
    std::vector<float> v(1 << 16, 1.0f);
    for (;;) c->all_reduce_sum(v);
    return 0;
  });
}

// Rank 0 in this process: a few all-reduces in step with the peers, then signal
// `victim` and return the CommError the next all-reduce raises, and how long it took.
std::pair<std::string, double> fail_after_signal(comm::Communicator& c, pid_t victim, int sig) {
  std::vector<float> v(1 << 16, 1.0f);
  for (int i = 0; i < 3; ++i) c.all_reduce_sum(v);
  ::kill(victim, sig);
  const auto t0 = Clock::now();
  try {
    for (int i = 0; i < 1000; ++i) c.all_reduce_sum(v);
  } catch (const comm::CommError& e) {
    return {e.what(), seconds_since(t0)};
  }
  return {"no error", seconds_since(t0)};
}

}  // namespace

TEST_CASE("SIGKILL of a peer process: CommError on the survivor at once, naming group and peer") {
  ScratchDir dir;
  const std::string prefix = fresh_prefix("kill");
  const pid_t peer = looping_peer(dir.path(), prefix, "dp[pp0/tp0]", 1, 2);
  comm::DirectoryStore store(dir.path());
  auto c = comm::connect_gloo(store, prefix, "dp[pp0/tp0]", 0, 2, options(10000ms));
  const auto [error, took] = fail_after_signal(*c, peer, SIGKILL);
  CHECK(wait_peer(peer) == -SIGKILL);
  CAPTURE(error);
  // The failing call names the peer itself, or quotes the watchdog that saw the
  // connection break first ("...: lost rank 1: ...").
  CHECK(error.rfind("dp[pp0/tp0]: rank 0: all_reduce_sum of 65536 floats", 0) == 0);
  CHECK(error.find("lost rank 1: ") != std::string::npos);
  CHECK(took < 5.0);  // far inside the 10 s timeout: the connection drops

  // The failure is final: later calls say so without touching the network.
  std::vector<float> v(4);
  CHECK_THROWS_WITH_AS(c->barrier(), doctest::Contains("unusable after an earlier failure"), comm::CommError);
  CHECK_THROWS_WITH_AS(c->send(v, 1, 0), doctest::Contains("lost rank 1"), comm::CommError);

  // Rebuild: a new generation under a fresh prefix with a new peer works.
  c.reset();
  const std::string gen2 = prefix + "/gen2";
  const pid_t fresh = fork_peer([&] {
    comm::DirectoryStore s(dir.path());
    auto c2 = comm::connect_gloo(s, gen2, "dp[pp0/tp0]", 1, 2, options());
    std::vector<float> w(1000, 2.0f);
    c2->all_reduce_sum(w);
    return w == std::vector<float>(1000, 3.0f) ? 0 : 1;
  });
  auto c2 = comm::connect_gloo(store, gen2, "dp[pp0/tp0]", 0, 2, options());
  std::vector<float> w(1000, 1.0f);
  c2->all_reduce_sum(w);
  CHECK(w == std::vector<float>(1000, 3.0f));
  CHECK(wait_peer(fresh) == 0);
}

TEST_CASE("SIGKILL of one of 3 members: both survivors fail fast, the dead rank is named") {
  ScratchDir dir;
  const std::string prefix = fresh_prefix("kill3");
  const pid_t peer = looping_peer(dir.path(), prefix, "tp[dp0/pp0]", 2, 3);
  comm::DirectoryStore store(dir.path());
  std::mutex mu;
  std::vector<std::pair<std::string, double>> results;
  std::vector<std::thread> ranks;
  std::atomic<int> ready{0};
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto c = comm::connect_gloo(store, prefix, "tp[dp0/pp0]", r, 3, options(10000ms));
      std::vector<float> v(1 << 16, 1.0f);
      for (int i = 0; i < 3; ++i) c->all_reduce_sum(v);
      if (++ready == 2) ::kill(peer, SIGKILL);
      const auto t0 = Clock::now();
      std::string error = "no error";
      try {
        for (int i = 0; i < 1000; ++i) c->all_reduce_sum(v);
      } catch (const comm::CommError& e) {
        error = e.what();
      }
      std::lock_guard lock(mu);
      results.emplace_back(error, seconds_since(t0));
    });
  for (auto& t : ranks) t.join();
  CHECK(wait_peer(peer) == -SIGKILL);
  REQUIRE(results.size() == 2);
  // Each survivor names rank 2: it saw the connection drop itself, or it saw the other
  // survivor close first and quotes that one's notice ("rank 0 failed first: ... lost rank 2").
  for (const auto& [error, took] : results) {
    CAPTURE(error);
    CHECK(error.find("tp[dp0/pp0]: rank ") != std::string::npos);
    CHECK(error.find("lost rank 2") != std::string::npos);
    CHECK(took < 5.0);
  }
}

TEST_CASE("SIGSTOP of a peer (alive but hung): CommError at the timeout naming the peer") {
  ScratchDir dir;
  const std::string prefix = fresh_prefix("stop");
  const pid_t peer = looping_peer(dir.path(), prefix, "embedding[dp0/tp0]", 1, 2);
  comm::DirectoryStore store(dir.path());
  auto c = comm::connect_gloo(store, prefix, "embedding[dp0/tp0]", 0, 2, options(1500ms));
  const auto [error, took] = fail_after_signal(*c, peer, SIGSTOP);
  ::kill(peer, SIGKILL);
  CHECK(wait_peer(peer) == -SIGKILL);
  CAPTURE(error);
  CHECK(error.find("embedding[dp0/tp0]: rank 0: all_reduce_sum of 65536 floats timed out after 1500 ms "
                   "waiting for rank 1") != std::string::npos);
  CHECK(took >= 1.4);
  CHECK(took < 4.0);
}

TEST_CASE("a rendezvous that a member never joins times out naming the missing rank") {
  comm::MemoryStore store;
  const auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(comm::connect_gloo(store, "job7/gen0", "dp[pp0/tp0]", 0, 3, options(500ms)),
                       doctest::Contains("dp[pp0/tp0]: rank 0: rendezvous under 'job7/gen0/dp[pp0/tp0]' in "
                                         "in-memory store timed out after 500 ms: rank(s) 1, 2 never arrived"),
                       comm::CommError);
  CHECK(seconds_since(t0) < 3.0);

  // A prefix used twice is refused instead of mixing two jobs' addresses.
  run_threads(2, "once", [](int, comm::Communicator&) {});
  comm::MemoryStore s2;
  std::vector<std::shared_ptr<comm::Communicator>> first(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] { first[r] = comm::connect_gloo(s2, "reused", "g", r, 2, options()); });
  for (auto& t : ts) t.join();
  CHECK_THROWS_WITH_AS(comm::connect_gloo(s2, "reused", "g", 0, 2, options(500ms)),
                       doctest::Contains("is set already"), comm::CommError);
}

TEST_CASE("abort releases a blocked member at once, fails later calls, and drops the peers' connections") {
  for (auto reduction : {comm::GlooReduction::kRankOrder, comm::GlooReduction::kRing}) {
    CAPTURE(std::string(comm::reduction_name(reduction)));
    comm::MemoryStore store;
    const std::string prefix = fresh_prefix("abort");
    std::shared_ptr<comm::Communicator> a, b;
    std::thread connect_b(
        [&] { b = comm::connect_gloo(store, prefix, "dp[pp0/tp1]", 1, 2, options(20000ms, reduction)); });
    a = comm::connect_gloo(store, prefix, "dp[pp0/tp1]", 0, 2, options(20000ms, reduction));
    connect_b.join();

    // a blocks in an all-reduce that b never joins; abort wakes it.
    std::string blocked_error;
    double blocked_for = 0;
    std::thread waiter([&] {
      std::vector<float> v(1 << 20, 1.0f);
      const auto t0 = Clock::now();
      try {
        a->all_reduce_sum(v);
      } catch (const comm::CommError& e) {
        blocked_error = e.what();
      }
      blocked_for = seconds_since(t0);
    });
    std::this_thread::sleep_for(200ms);
    a->abort("stage/dp1/pp0/tp1 died");
    waiter.join();
    CHECK(blocked_error.find("dp[pp0/tp1]: rank 0: all_reduce_sum of 1048576 floats: aborted: "
                             "stage/dp1/pp0/tp1 died") != std::string::npos);
    CHECK(blocked_for < 2.0);
    std::vector<float> v(4);
    CHECK_THROWS_WITH_AS(a->barrier(), doctest::Contains("aborted: stage/dp1/pp0/tp1 died"), comm::CommError);
    CHECK_THROWS_WITH_AS(a->recv(v, 1, 0), doctest::Contains("aborted"), comm::CommError);

    // The peer does not wait for its timeout: the connection is gone.
    const auto t0 = Clock::now();
    // and it learns why: the aborting member told it before closing. (Its watchdog may
    // have failed the communicator before the call: then the call quotes that failure.)
    std::string peer_error;
    try {
      b->barrier();
    } catch (const comm::CommError& e) {
      peer_error = e.what();
    }
    CAPTURE(peer_error);
    CHECK(peer_error.rfind("dp[pp0/tp1]: rank 1: barrier", 0) == 0);
    CHECK(peer_error.find("lost rank 0: ") != std::string::npos);
    CHECK(peer_error.find("(rank 0 failed first: aborted: stage/dp1/pp0/tp1 died)") != std::string::npos);
    CHECK(seconds_since(t0) < 2.0);
  }
}

TEST_CASE("abort releases a blocked recv; buffered sends survive a sender that is destroyed at once") {
  auto connect_pair = [](comm::MemoryStore& store, const std::string& prefix) {
    std::shared_ptr<comm::Communicator> a, b;
    std::thread connect_b([&] { b = comm::connect_gloo(store, prefix, "pp[dp0/tp0]:0-1", 1, 2, options()); });
    a = comm::connect_gloo(store, prefix, "pp[dp0/tp0]:0-1", 0, 2, options());
    connect_b.join();
    return std::make_pair(a, b);
  };
  comm::MemoryStore store;
  {
    // Buffered: send returns before the receiver posts anything, and destroying the
    // sender waits until the message went out.
    auto [a, b] = connect_pair(store, fresh_prefix("p2p"));
    std::vector<float> msg(100000);
    for (size_t i = 0; i < msg.size(); ++i) msg[i] = float(i);
    a->send(msg, 1, 9);
    std::fill(msg.begin(), msg.end(), -1.0f);  // the communicator sends its own copy
    std::thread late_receiver([&] {
      std::this_thread::sleep_for(200ms);
      std::vector<float> got(100000);
      b->recv(got, 0, 9);
      for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == float(i));
    });
    a.reset();
    late_receiver.join();
    // With the sender gone, a recv from it fails at once instead of waiting.
    std::vector<float> got(10);
    CHECK_THROWS_WITH_AS(b->recv(got, 0, 1), doctest::Contains("lost rank 0"), comm::CommError);
  }
  {
    // b waits for a message that never comes; abort from another thread ends it.
    auto [a, b] = connect_pair(store, fresh_prefix("p2p"));
    std::string error;
    std::thread waiter([&] {
      std::vector<float> got(10);
      try {
        b->recv(got, 0, 1);
      } catch (const comm::CommError& e) {
        error = e.what();
      }
    });
    std::this_thread::sleep_for(100ms);
    b->abort("rebuilding after a failure");
    waiter.join();
    CHECK(error ==
          "pp[dp0/tp0]:0-1: rank 1: recv of 10 floats with tag 1 from rank 0: aborted: rebuilding after a failure");
  }
}

TEST_CASE("a buffered send to a peer that dies surfaces on the next call") {
  ScratchDir dir;
  const std::string prefix = fresh_prefix("dead-recv");
  const pid_t peer = fork_peer([&] {
    comm::DirectoryStore s(dir.path());
    auto c = comm::connect_gloo(s, prefix, "pp[dp0/tp0]:0-1", 1, 2, options());
    c->barrier();
    ::pause();  // never receives; killed below
    return 0;
  });
  comm::DirectoryStore store(dir.path());
  auto c = comm::connect_gloo(store, prefix, "pp[dp0/tp0]:0-1", 0, 2, options(10000ms));
  c->barrier();
  c->send(std::vector<float>(1000, 1.0f), 1, 4);  // returns: buffered
  ::kill(peer, SIGKILL);
  CHECK(wait_peer(peer) == -SIGKILL);
  const auto t0 = Clock::now();
  std::string error;
  for (int i = 0; i < 200 && error.empty(); ++i) {
    try {
      c->send(std::vector<float>(1, 0.0f), 1, 4);
    } catch (const comm::CommError& e) {
      error = e.what();
    }
    std::this_thread::sleep_for(10ms);
  }
  CAPTURE(error);
  CHECK(error.find("pp[dp0/tp0]:0-1: rank 0") != std::string::npos);
  CHECK(error.find("rank 1") != std::string::npos);
  CHECK(seconds_since(t0) < 3.0);
}
