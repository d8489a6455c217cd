#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "metrics/straggler.h"

using namespace troupe::metrics;

TEST_CASE("nearest-rank percentile") {
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  CHECK(percentile(v, 0.95) == 19);
  CHECK(percentile(v, 0.5) == 10);
  CHECK(percentile(v, 1.0) == 20);
  CHECK(percentile(v, 0.01) == 1);
  v.clear();
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(percentile(v, 0.95) == 95);
  CHECK(percentile({7}, 0.95) == 7);
  CHECK(percentile({}, 0.95) == 0);
}

TEST_CASE("duration series: totals over everything, quantiles over the retained window") {
  DurationSeries s(4);
  for (double d : {1.0, 2.0, 3.0, 4.0, 10.0, 20.0}) s.add(d);
  const auto st = s.stats();
  CHECK(st.count == 6);
  CHECK(st.total_s == 40.0);
  // Retained: the last 4 = {3, 4, 10, 20}.
  CHECK(st.median_s == 7.0);
  CHECK(st.p95_s == 20.0);
  CHECK(st.max_s == 20.0);
}

TEST_CASE("peer groups drop only the data-parallel coordinate") {
  CHECK(peer_group("stage/dp1/pp0/tp0") == "stage/dp*/pp0/tp0");
  CHECK(peer_group("stage/dp12/pp3/tp1") == "stage/dp*/pp3/tp1");
  CHECK(peer_group("optim/dp0/pp1/tp0") == "optim/dp*/pp1/tp0");
  CHECK(peer_group("loader/dp3") == "loader/dp*");
  CHECK(peer_group("coordinator") == "coordinator");
  CHECK(peer_group("stage/dpx/pp0") == "stage/dpx/pp0");
}

TEST_CASE("straggler report names the rank slower than its peers") {
  TimingLog log;
  // Two pipeline stages x three replicas. Stage 1 is slower by design (the loss
  // head) and must not be called a straggler for it; dp2's stage 0 is 50% slower
  // than its peers.
  for (int mb = 0; mb < 20; ++mb) {
    const double jitter = 0.0001 * (mb % 5);
    for (int dp = 0; dp < 3; ++dp) {
      const std::string s0 = "stage/dp" + std::to_string(dp) + "/pp0/tp0";
      const std::string s1 = "stage/dp" + std::to_string(dp) + "/pp1/tp0";
      log.compute(s0, (dp == 2 ? 0.015 : 0.010) + jitter);
      log.compute(s1, 0.020 + jitter);
      log.wait(s0, 0.001);
      log.wait(s1, 0.007);
    }
  }
  const auto r = straggler_report(log);
  REQUIRE(r.actors.size() == 6);
  CHECK(r.actors[0].actor == "stage/dp0/pp0/tp0");
  CHECK(r.actors[0].compute.count == 20);
  CHECK(r.actors[0].compute.median_s == doctest::Approx(0.0102));
  CHECK(r.actors[0].compute.p95_s == doctest::Approx(0.0104));
  CHECK(r.actors[0].wait.median_s == doctest::Approx(0.001));
  CHECK(r.actors[0].wait_fraction == doctest::Approx(0.020 / (0.204 + 0.020)));
  // dp2's peers at stage 0 have medians {0.0102, 0.0102}; dp0's peers {0.0102, 0.0152}.
  const auto& slow = r.actors[4];
  CHECK(slow.actor == "stage/dp2/pp0/tp0");
  CHECK(slow.slowdown == doctest::Approx(0.0152 / 0.0102));
  CHECK(r.actors[0].slowdown == doctest::Approx(0.0102 / 0.0127));
  CHECK(r.actors[1].slowdown == doctest::Approx(1.0));  // stage/dp0/pp1/tp0
  CHECK(r.slowest == std::vector<std::string>{"stage/dp2/pp0/tp0"});

  const std::string text = format_straggler_report(r);
  CHECK(text.find("stage/dp2/pp0/tp0       20       15.20       15.40        1.00        1.00   6.2%     1.49x") !=
        std::string::npos);
  CHECK(text.find("slowest ranks: stage/dp2/pp0/tp0 (1.49x its peers, median 15.20 ms)\n") != std::string::npos);
}

TEST_CASE("with two replicas the slow one is measured against the other") {
  TimingLog log;
  for (int mb = 0; mb < 10; ++mb) {
    log.compute("stage/dp0/pp0/tp0", 0.010);
    log.compute("stage/dp1/pp0/tp0", 0.013);
  }
  const auto r = straggler_report(log);
  CHECK(r.actors[0].slowdown == doctest::Approx(0.010 / 0.013));
  CHECK(r.actors[1].slowdown == doctest::Approx(1.3));
  CHECK(r.slowest == std::vector<std::string>{"stage/dp1/pp0/tp0"});
}

TEST_CASE("straggler report with balanced ranks names none") {
  TimingLog log;
  for (int dp = 0; dp < 4; ++dp)
    for (int mb = 0; mb < 8; ++mb) log.compute("stage/dp" + std::to_string(dp) + "/pp0/tp0", 0.010 + 0.0001 * dp);
  log.wait("coordinator", 0.5);  // no compute: judged against nobody
  const auto r = straggler_report(log);
  CHECK(r.slowest.empty());
  CHECK(r.actors[0].actor == "coordinator");
  CHECK(r.actors[0].slowdown == 1.0);
  CHECK(r.actors[0].wait_fraction == 1.0);
  const std::string text = format_straggler_report(r);
  CHECK(text.substr(text.rfind('\n', text.size() - 2) + 1) ==
        "no straggler: every rank within 10% of its peers' median compute time\n");
  // A tighter threshold names the slowest ones, slowest first, at most max_named.
  const auto tight = straggler_report(log, 1.004, 2);
  CHECK(tight.slowest == std::vector<std::string>{"stage/dp3/pp0/tp0", "stage/dp2/pp0/tp0"});
}
