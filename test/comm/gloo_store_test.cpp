// Rendezvous stores: set-once keys, waits that time out naming the missing keys, and a
// directory store that works between processes.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <thread>

#include "comm/gloo_store.h"
#include "test/comm/gloo_test_util.h"

using namespace troupe;
using namespace gloo_test;

namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

void check_store_basics(comm::Store& store) {
  const std::vector<char> binary{'\0', '\x01', '\xff', 'a', '\0'};
  store.set("job/gen1/dp[pp0/tp0]/0", binary);
  store.set("plain", bytes("value"));
  store.set(std::string(300, 'k'), bytes("long key"));
  store.set("rank_1", {});
  CHECK(store.get("job/gen1/dp[pp0/tp0]/0", 100ms) == binary);
  CHECK(store.get("plain", 100ms) == bytes("value"));
  CHECK(store.get(std::string(300, 'k'), 100ms) == bytes("long key"));
  CHECK(store.get("rank_1", 100ms).empty());
  store.wait({"plain", "rank_1"}, 100ms);

  // Set once: a second set of a key means a reused prefix.
  CHECK_THROWS_WITH_AS(store.set("plain", bytes("other")), doctest::Contains("key 'plain' is set already"),
                       comm::CommError);
  CHECK(store.get("plain", 100ms) == bytes("value"));

  // A wait names what never came, and ends on time.
  const auto t0 = Clock::now();
  try {
    store.wait({"plain", "job/missing/1", "job/missing/rank_2"}, 200ms);
    FAIL("wait did not time out");
  } catch (const comm::StoreTimeout& e) {
    CHECK(std::string(e.what()).find("timed out after 200 ms waiting for key(s) 'job/missing/1', "
                                     "'job/missing/rank_2'") != std::string::npos);
    CHECK(e.missing() == std::vector<std::string>{"job/missing/1", "job/missing/rank_2"});
  }
  const auto waited = Clock::now() - t0;
  CHECK(waited >= 200ms);
  CHECK(waited < 2s);

  // A value set while someone waits wakes the waiter.
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    store.set("late", bytes("here"));
  });
  CHECK(store.get("late", 5000ms) == bytes("here"));
  late.join();
}

}  // namespace

TEST_CASE("MemoryStore: set-once keys, get, wait and timeouts") {
  comm::MemoryStore store;
  check_store_basics(store);
}

TEST_CASE("DirectoryStore: set-once keys, get, wait and timeouts; no temporaries left") {
  ScratchDir dir;
  comm::DirectoryStore store(dir.path() + "/store");
  check_store_basics(store);
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/store"))
    CHECK(e.path().filename().string().rfind(".tmp-", 0) == std::string::npos);
  // Odd keys map to distinct plain files inside the directory.
  CHECK(store.path_of("a/b") != store.path_of("a%2Fb"));
  CHECK(std::filesystem::path(store.path_of("../x")).parent_path() == dir.path() + "/store");
  CHECK(std::filesystem::path(store.path_of(std::string(500, 'z'))).filename().string().size() <= 200);
}

TEST_CASE("DirectoryStore: a key set by another process, and a directory that cannot be made") {
  ScratchDir dir;
  const std::string path = dir.path() + "/shared";
  const pid_t child = fork_peer([&] {
    comm::DirectoryStore store(path);
    std::this_thread::sleep_for(100ms);
    store.set("from-child", bytes("hello"));
    return store.get("from-parent", 5000ms) == bytes("hi") ? 0 : 1;
  });
  comm::DirectoryStore store(path);
  CHECK(store.get("from-child", 5000ms) == bytes("hello"));
  store.set("from-parent", bytes("hi"));
  CHECK(wait_peer(child) == 0);

  // Two processes racing to set one key: exactly one wins.
  const pid_t racer = fork_peer([&] {
    comm::DirectoryStore s(path);
    try {
      s.set("race", bytes("child"));
      return 0;
    } catch (const comm::CommError&) {
      return 1;
    }
  });
  int parent_won = 1;
  try {
    store.set("race", bytes("parent"));
  } catch (const comm::CommError&) {
    parent_won = 0;
  }
  const int child_lost = wait_peer(racer);
  CHECK(parent_won + (1 - child_lost) == 1);
  const auto winner = store.get("race", 100ms);
  CHECK(winner == bytes(parent_won ? "parent" : "child"));

  CHECK_THROWS_WITH_AS(comm::DirectoryStore("/proc/version/store"), doctest::Contains("/proc/version/store"),
                       comm::CommError);
}
