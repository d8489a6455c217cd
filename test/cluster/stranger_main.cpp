// The strangers of test_cluster_strangers, as a process of their own (so that the
// supervisor's memory is measured without them): connections to 127.0.0.1:PORT that do
// not know the run's secret, and one that replays a recorded handshake.
//
//   stranger PORT plain|tls before OUT     every probe, the flood and the replay, each
//                                          waited for; results to OUT
//   stranger PORT plain|tls during OUT RUN_DIR
//                                          the same at once from the run's first step on
//
// OUT: lines key=value (flood_limited, replay_first_admitted, replay_refused,
// replay_reason, not_closed). Every loop is bounded.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/cluster_protocol.h"
#include "actors/cluster/join_channel.h"
#include "actors/cluster/join_protocol.h"
#include "actors/cluster/tls_context.h"
#include "test/cluster/loopback.h"

using namespace troupe;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// How long the flood's connections stay open; and how long a probe waits for the gate to
// close it. The gate's deadline (cluster.handshake_timeout_s) is 2 s in the suite; the
// probe's bound is five times that, so a machine busy enough to delay the gate's thread
// by a second does not turn a closed connection into "not closed" (a probe returns as
// soon as the gate closes it, so the bound costs nothing while the gate works).
constexpr auto kFloodHold = std::chrono::seconds(3);
constexpr auto kCloseBound = std::chrono::seconds(10);
std::string g_secret;

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
  bool must_be_closed;  // the supervisor closes it within kCloseBound
};

// What strangers send (none knows the secret). The join frame header is "TRP1" and a
// 16-bit length (actors/cluster/join_protocol.h); BASP's is 26 bytes whose last 4 are the length.
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
    return recorded = actors::hmac_sha256_hex(g_secret, actors::worker_join_text(ch.nonce, hello.nonce, binding));
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

// 200 connections that send nothing, held kFloodHold; whether the gate closed at least one
// of them at once (the bound on pending handshakes).
bool flood(uint16_t port) {
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i)
    if (const int fd = testing::dial_loopback(port); fd >= 0) fds.push_back(fd);
  bool some_closed = false;
  for (int fd : fds) some_closed = some_closed || hold(fd, std::chrono::milliseconds(1));
  if (!some_closed && !fds.empty()) some_closed = hold(fds.back(), std::chrono::seconds(10));
  std::this_thread::sleep_for(kFloodHold);
  for (int fd : fds) ::close(fd);
  return some_closed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || (std::string(argv[3]) == "during" && argc < 6)) {
    std::fprintf(stderr, "usage: stranger PORT plain|tls before|during OUT [RUN_DIR] (secret in TROUPE_SECRET)\n");
    return 2;
  }
  const auto port = uint16_t(std::stoi(argv[1]));
  const bool tls = std::string(argv[2]) == "tls";
  const bool during = std::string(argv[3]) == "during";
  const char* secret = std::getenv("TROUPE_SECRET");
  g_secret = secret ? secret : "";
  if (during) wait_for_first_step(argv[5]);
  std::mutex mu;
  std::vector<std::string> not_closed;
  const auto probe = [&](const Probe& p) {
    const int fd = testing::dial_loopback(port);
    if (fd < 0) return;
    send_bytes(fd, p.bytes);
    const bool closed = hold(fd, kCloseBound);
    ::close(fd);
    if (p.must_be_closed && !closed) {
      std::lock_guard lock(mu);
      not_closed.push_back(p.name);
    }
  };
  bool flood_limited = false;
  Replay replay;
  std::vector<std::thread> each;
  if (!during) flood_limited = flood(port);  // first, so its refusals are certain
  else each.emplace_back([&] { flood_limited = flood(port); });
  for (const auto& p : probes()) each.emplace_back([&, p] { probe(p); });
  each.emplace_back([&] { replay = replay_handshake(port, tls); });
  for (auto& t : each) t.join();
  std::ofstream out(argv[4]);
  out << "flood_limited=" << flood_limited << "\n"
      << "replay_first_admitted=" << replay.first_admitted << "\n"
      << "replay_refused=" << replay.replay_refused << "\n"
      << "replay_reason=" << replay.replay_reason << "\n"
      << "not_closed=";
  for (const auto& n : not_closed) out << n << ";";
  out << "\n";
  return out ? 0 : 1;
}
