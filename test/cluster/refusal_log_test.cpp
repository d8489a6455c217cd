// The run's refusal record is bounded (actors/cluster/refusal_log.h): a stranger that
// reconnects in a loop adds to the count, not to the memory; the log's line policy.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "actors/cluster/refusal_log.h"

using troupe::actors::RefusalLog;

TEST_CASE("RefusalLog keeps the first kKept refusals in order and counts every one, from two threads") {
  RefusalLog log;
  for (int i = 0; i < 10; ++i) log.add("127.0.0.1:" + std::to_string(i), "reason " + std::to_string(i));
  REQUIRE(log.kept().size() == 10);
  CHECK(log.kept()[3].worker == "127.0.0.1:3");
  CHECK(log.kept()[3].reason == "reason 3");
  auto flood = [&] {
    for (int i = 0; i < 2500; ++i) log.add("127.0.0.1:9", "32 connections are already in the join handshake");
  };
  std::thread other(flood);
  flood();
  other.join();
  CHECK(log.total() == 5010);
  const auto kept = log.kept();
  CHECK(kept.size() == RefusalLog::kKept);
  CHECK(kept[9].reason == "reason 9");  // the first ones stay
  CHECK(kept.back().reason == "32 connections are already in the join handshake");
}

TEST_CASE("RefusalLog::logs_line: the first kKept, then every kLogEvery-th") {
  CHECK(RefusalLog::logs_line(1));
  CHECK(RefusalLog::logs_line(int64_t(RefusalLog::kKept)));
  CHECK_FALSE(RefusalLog::logs_line(int64_t(RefusalLog::kKept) + 1));
  CHECK(RefusalLog::logs_line(2 * RefusalLog::kLogEvery));
  CHECK_FALSE(RefusalLog::logs_line(2 * RefusalLog::kLogEvery + 1));
  int lines = 0;
  for (int64_t n = 1; n <= 100000; ++n) lines += RefusalLog::logs_line(n);
  CHECK(lines == int(RefusalLog::kKept) + 99);  // 2000, 3000, ..., 100000
}
