// Strangers on the port (docs/cluster.md "Threat model"): while a cluster run trains
// (two workers and a spare, on loopback), connections without the secret send what a
// port scanner, a health check, a stray curl or an attacker would, and a worker with a
// wrong secret, a replayed handshake and (on TLS) a plaintext client try to join. The
// run must not notice: it completes bitwise equal to the in-process run, with no
// restart and no quarantine, and the supervisor's peak RSS stays within
// kRssAllowanceBytes of the same run without strangers.
//
// Tolerances, fixed before the first run: weights and Adam moments bitwise (memcmp);
// peak RSS (VmHWM, reset through /proc/self/clear_refs before each run) at most 16 MiB
// above the run without strangers. Every loop here is bounded.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <optional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "actors/cluster_auth.h"
#include "actors/cluster_protocol.h"
#include "actors/join_channel.h"
#include "actors/join_protocol.h"
#include "actors/tls_context.h"
#include "actors/worker_process.h"
#include "test/actors/parity_check.h"
#include "test/cluster/cluster_harness.h"
#include "test/cluster/loopback.h"
#include "test/cluster/worker_launcher.h"

using namespace troupe;
using namespace troupe::cluster_harness;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kRssAllowanceBytes = int64_t(16) << 20;
constexpr auto kHold = std::chrono::seconds(3);

// Peak resident set of this process (the supervisor) since the last reset.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

void send_bytes(int fd, const std::string& bytes) {
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;  // the supervisor closed it: that is allowed
    at += size_t(n);
  }
}

// Keeps `fd` open (reading and dropping whatever comes) until the supervisor closes it
// or `hold` passes; returns whether the supervisor closed it.
bool hold(int fd, std::chrono::milliseconds hold_for) {
  const auto until = Clock::now() + hold_for;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = char(gen() & 0xff);
  return out;
}

struct Probe {
  std::string name;
  std::string bytes;   // sent at once
  bool must_be_closed;  // the supervisor closes it before the hold ends
};

// What strangers send (none knows the secret). The join frame header is "TRP1" and a
// 16-bit length (actors/join_protocol.h); BASP's is 26 bytes whose last 4 are the length.
std::vector<Probe> probes() {
  std::string basp_header(26, '\0');
  std::string basp_header_huge = basp_header;
  basp_header_huge[22] = basp_header_huge[23] = basp_header_huge[24] = basp_header_huge[25] = char(0xff);
  std::string basp_header_2_30 = basp_header;
  basp_header_2_30[22] = char(0x40);
  std::string tls_client_hello = std::string("\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03", 11) + random_bytes(32, 3);
  actors::JoinHello hello;
  hello.protocol = actors::kClusterProtocolVersion;
  hello.slots = 1;
  hello.host = "stranger";
  hello.nonce = std::string(32, 'a');
  const auto hello_frame = actors::encode_frame(actors::to_fields(hello));
  return {
      {"64 KiB of random bytes", random_bytes(64 << 10, 1), true},
      {"an HTTP request", "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/7.88\r\n\r\n", true},
      {"TLS ClientHello-like bytes", tls_client_hello, true},
      {"a truncated join header, held", hello_frame.substr(0, 10), true},
      {"a join header whose payload never comes, held", std::string("TRP1\x10\x00", 6), true},
      {"a join header declaring 65535 bytes", std::string("TRP1\xff\xff", 6) + random_bytes(64, 5), true},
      {"a BASP header declaring 2^32-1 bytes", basp_header_huge, true},
      {"a BASP header declaring 2^30 bytes", basp_header_2_30, true},
      {"a join hello and then silence", hello_frame, true},
      {"nothing at all", "", true},
  };
}

// One join attempt with the right secret whose proof is recorded, then the same hello
// and the recorded proof on a fresh connection: the second must be refused. Each is
// tried again (bounded) while the flood holds every handshake slot.
struct Replay {
  bool first_admitted = false;
  bool replay_refused = false;
  std::string replay_reason;
};

// One handshake whose proof `proof_for` computes; the verdict, or nullopt when the
// connection closed before one came.
std::optional<actors::JoinVerdict> try_join(uint16_t port, SSL_CTX* tls, const actors::JoinHello& hello,
                                            const std::function<std::string(const actors::JoinChallenge&,
                                                                            const std::string&)>& proof_for) {
  const int fd = testing::dial_loopback(port);
  if (fd < 0) return std::nullopt;
  actors::set_nonblocking(fd);
  std::shared_ptr<SSL> session = tls ? actors::new_tls_session(tls, fd, false) : nullptr;
  actors::JoinChannel ch(fd, session);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  bool timed_out = false;
  const auto step = [&](const std::function<actors::Io()>& f) {
    return actors::drive(fd, f, deadline, timed_out) == actors::Io::done;
  };
  actors::FrameFields f;
  actors::JoinChallenge challenge;
  std::optional<actors::JoinVerdict> verdict;
  if (step([&] { return ch.handshake(); }) && (ch.send(actors::to_fields(hello)), step([&] { return ch.flush(); })) &&
      step([&] { return ch.read_frame(f); }) && !actors::from_fields(f, challenge) && challenge.ok) {
    ch.send(actors::to_fields(actors::JoinProof{proof_for(challenge, ch.binding())}));
    actors::JoinVerdict v;
    if (step([&] { return ch.flush(); }) && step([&] { return ch.read_frame(f); }) && !actors::from_fields(f, v))
      verdict = v;
  }
  ::close(fd);
  return verdict;
}

Replay replay_handshake(uint16_t port, bool tls) {
  Replay out;
  std::shared_ptr<SSL_CTX> ctx;
  if (tls) ctx = actors::make_tls_context(actors::TlsOptions{true, "", "", ""}, /*server=*/false);
  actors::JoinHello hello;
  hello.protocol = actors::kClusterProtocolVersion;
  hello.slots = 1;
  hello.host = "replayer";
  hello.pid = 1;
  hello.nonce = actors::random_hex(32);
  std::string recorded;
  const auto record = [&](const actors::JoinChallenge& ch, const std::string& binding) {
    return recorded = actors::hmac_sha256_hex(kSecretText, actors::worker_join_text(ch.nonce, hello.nonce, binding));
  };
  const auto replay = [&](const actors::JoinChallenge&, const std::string&) { return recorded; };
  const auto until = Clock::now() + std::chrono::seconds(30);
  std::optional<actors::JoinVerdict> v;
  while (!v && Clock::now() < until) v = try_join(port, ctx.get(), hello, record);
  out.first_admitted = v && v->ok;
  v.reset();
  while (!v && Clock::now() < until) v = try_join(port, ctx.get(), hello, replay);
  out.replay_refused = v && !v->ok;
  if (v) out.replay_reason = v->reason;
  return out;
}

// Waits (bounded) until the run in `dir` has recorded its first step.
void wait_for_first_step(const fs::path& dir) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"step\"") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Config stranger_config(const std::string& name) {
  Config c = tiny(name, 2, 1, 2, 1);
  // Long enough for the strangers to arrive while it trains (the gate's limits and
  // deadline themselves are pinned in gate_test.cpp); a handshake deadline below the
  // probes' hold, so held connections meet it while the run lasts.
  c.mutable_training()->set_train_samples(8 * 300);
  c.mutable_cluster()->set_handshake_timeout_s(2);
  return c;
}

void check_strangers(bool tls) {
  const std::string mode = tls ? "tls" : "plain";
  const auto want = testing::run(local_of(stranger_config("strangers-" + mode)));

  // The same run without strangers: the memory it needs.
  reset_peak_rss();
  const auto quiet = run_cluster(stranger_config("quiet-" + mode), 3, true, nullptr, std::chrono::seconds(20), tls);
  const int64_t quiet_peak = peak_rss_bytes();
  REQUIRE_MESSAGE(quiet.result.outcome.status == "completed", quiet.result.outcome.error);

  const Config c = stranger_config("strangers-" + mode);
  std::vector<std::string> not_closed;
  std::mutex mu;
  Replay replay;
  Worker wrong;
  std::vector<std::thread> strangers;
  reset_peak_rss();
  const auto run = run_cluster(
      c, 3, true,
      [&](uint16_t port, ClusterRun&) {
        // From the first step on, every stranger at once, each on its own thread.
        strangers.emplace_back([&, port] {
          wait_for_first_step(c.logging().run_dir());
          std::vector<std::thread> each;
          for (const auto& p : probes())
            each.emplace_back([&, p] {
              const int fd = testing::dial_loopback(port);
              if (fd < 0) return;
              send_bytes(fd, p.bytes);
              const bool closed = hold(fd, kHold);
              ::close(fd);
              if (p.must_be_closed && !closed) {
                std::lock_guard lock(mu);
                not_closed.push_back(p.name);
              }
            });
          each.emplace_back([&] {  // a flood: 200 connections that send nothing
            std::vector<int> fds;
            for (int i = 0; i < 200; ++i)
              if (const int fd = testing::dial_loopback(port); fd >= 0) fds.push_back(fd);
            std::this_thread::sleep_for(kHold);
            for (int fd : fds) ::close(fd);
          });
          each.emplace_back([&] { replay = replay_handshake(port, tls); });
          each.emplace_back([&] {  // a worker with a wrong secret
            const auto secret = write_secret("wrong-" + mode, "00000000000000000000000000000000");
            auto args = testing::worker_args(port, secret);
            if (tls) args.push_back("--tls");
            wrong.log = (kRoot / ("wrong-" + mode + ".log")).string();
            wrong.pid = testing::launch_process(TROUPE_SUPERVISOR_BIN, args, wrong.log);
            wrong.status = testing::reap_process(wrong.pid, std::chrono::seconds(30), &wrong.killed);
          });
          for (auto& t : each) t.join();
        });
      },
      std::chrono::seconds(20), tls);
  for (auto& t : strangers) t.join();
  const int64_t peak = peak_rss_bytes();

  INFO(run.logs());
  REQUIRE_MESSAGE(run.result.outcome.status == "completed", run.result.outcome.error);
  check_same_state(*run.result.state, *want.state);
  check_same_steps(run.result, want);
  CHECK(run.result.restarts == 0);
  CHECK(run.result.quarantine.empty());
  CHECK(run.result.workers.size() == 3);
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));

  // Every stranger was shown the door, each with its reason on one line.
  for (const auto& name : not_closed) CHECK_MESSAGE(false, "the supervisor did not close: " << name);
  std::string reasons;
  for (const auto& r : run.result.refusals) {
    CHECK(r.worker.rfind("127.0.0.1:", 0) == 0);
    reasons += r.worker + ": " + r.reason + "\n";
  }
  INFO(reasons);
  if (tls) {
    CHECK(reasons.find("TLS handshake failed") != std::string::npos);
  } else {
    CHECK(reasons.find("does not speak troupe's join protocol") != std::string::npos);
    CHECK(reasons.find("declared a join message of 65535 bytes") != std::string::npos);
  }
  CHECK(reasons.find("already in the join handshake (the limit)") != std::string::npos);
  CHECK(reasons.find("wrong secret") != std::string::npos);
  CHECK(replay.first_admitted);
  CHECK(replay.replay_refused);
  CHECK(replay.replay_reason.find("wrong secret") != std::string::npos);
  {
    INFO(testing::tail_of(wrong.log));
    CHECK(exited_with(wrong, actors::kWorkerRefused));
  }

  // The supervisor's memory: what the run needs, not what strangers declare.
  MESSAGE("peak RSS with strangers " << peak << " B, without " << quiet_peak << " B (" << mode << ")");
  CHECK(peak - quiet_peak <= kRssAllowanceBytes);
}

}  // namespace

TEST_CASE("strangers on the port of a plain run: the run completes bitwise, nothing restarts") {
  check_strangers(false);
}

TEST_CASE("strangers on the port of a TLS run: the run completes bitwise, nothing restarts") { check_strangers(true); }
