// The supervisor's gate and the join handshake (actors/cluster/cluster_gate.h,
// actors/cluster/join_protocol.h), without CAF: a Gate on loopback whose admissions are
// recorded, and clients that speak the protocol (or do not).
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/cluster_gate.h"
#include "actors/cluster/join_channel.h"
#include "actors/cluster/join_protocol.h"
#include "actors/cluster/tls_context.h"
#include "test/cluster/loopback.h"

using namespace troupe;
using namespace troupe::actors;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef";

// A gate whose refusals and admissions are recorded.
struct TestGate {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> refusals;
  std::vector<int> admitted;  // fds handed over (closed at the end)
  std::shared_ptr<JoinTickets> tickets = std::make_shared<JoinTickets>();
  std::unique_ptr<Gate> gate;

  explicit TestGate(GateOptions o = {}) {
    o.secret = kSecret;
    o.protocol = 4;
    o.config_hash = 0x1234;
    o.tickets = tickets;
    o.admit = [this](int fd, std::shared_ptr<SSL>) {
      std::lock_guard lock(mu);
      admitted.push_back(fd);
      cv.notify_all();
    };
    o.on_refused = [this](const std::string& who, const std::string& why) {
      std::lock_guard lock(mu);
      refusals.emplace_back(who, why);
      cv.notify_all();
    };
    gate = std::make_unique<Gate>(std::move(o));
  }
  ~TestGate() {
    gate.reset();
    for (int fd : admitted) ::close(fd);
  }
  // Waits (at most 10 s) until `n` refusals are in; returns them.
  std::vector<std::pair<std::string, std::string>> await_refusals(size_t n) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return refusals.size() >= n; });
    return refusals;
  }
  size_t admissions() {
    std::lock_guard lock(mu);
    return admitted.size();
  }
};

int dial(uint16_t port) {
  const int fd = testing::dial_loopback(port);
  REQUIRE(fd >= 0);
  return fd;
}

// Whether the peer closed `fd` within `within` (whatever it sent before is dropped).
bool closed_by_peer(int fd, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  char buf[512];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

JoinHello a_hello() {
  JoinHello h;
  h.protocol = 4;
  h.config_hash = 0x1234;
  h.slots = 2;
  h.host = "testhost";
  h.gloo_host = "127.0.0.1";
  h.pid = 42;
  h.nonce = random_hex(32);
  return h;
}

// A client of the join handshake; `proof_for` computes the proof it sends (the right
// one by default).
struct Client {
  JoinChallenge challenge;
  JoinVerdict verdict;
  std::string error;
  std::string binding;
  bool got_challenge = false, got_verdict = false;
};
Client join(uint16_t port, const std::string& secret, JoinHello hello = a_hello(), SSL_CTX* tls = nullptr,
            std::function<std::string(const JoinChallenge&, const std::string& binding)> proof_for = nullptr) {
  Client out;
  const int fd = dial(port);
  set_nonblocking(fd);
  std::shared_ptr<SSL> session = tls ? new_tls_session(tls, fd, false) : nullptr;
  JoinChannel ch(fd, session);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  bool timed_out = false;
  FrameFields f;
  const auto run = [&](const std::function<Io()>& step) {
    const bool ok = drive(fd, step, deadline, timed_out) == Io::done;
    if (!ok && out.error.empty()) out.error = timed_out ? "timed out" : ch.error();
    return ok;
  };
  if (run([&] { return ch.handshake(); })) {
    out.binding = ch.binding();
    ch.send(to_fields(hello));
    if (run([&] { return ch.flush(); }) && run([&] { return ch.read_frame(f); }) && !from_fields(f, out.challenge)) {
      out.got_challenge = true;
      if (out.challenge.ok) {
        const auto proof = proof_for ? proof_for(out.challenge, out.binding)
                                     : hmac_sha256_hex(secret, worker_join_text(out.challenge.nonce, hello.nonce,
                                                                                out.binding));
        ch.send(to_fields(JoinProof{proof}));
        if (run([&] { return ch.flush(); }) && run([&] { return ch.read_frame(f); }) && !from_fields(f, out.verdict))
          out.got_verdict = true;
      }
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("join frames: round trip, and every malformed header or payload refused with its reason") {
  const FrameFields fields{{"kind", "hello"}, {"nonce", "abc"}, {"host", "a b=c"}};
  const auto frame = encode_frame(fields);
  REQUIRE(frame.size() > kFrameHeaderBytes);
  size_t declared = 0;
  CHECK(!parse_frame_header(reinterpret_cast<const unsigned char*>(frame.data()), declared));
  CHECK(declared == frame.size() - kFrameHeaderBytes);
  FrameFields back;
  CHECK(!parse_frame_payload(frame.substr(kFrameHeaderBytes), back));
  CHECK(back == fields);

  const unsigned char http[] = {'G', 'E', 'T', ' ', '/', ' '};
  const auto bad_magic = parse_frame_header(http, declared);
  REQUIRE(bad_magic);
  CHECK(bad_magic->find("does not speak troupe's join protocol (first bytes 47 45 54 20)") != std::string::npos);
  const unsigned char huge[] = {'T', 'R', 'P', '1', 0xff, 0xff};
  const auto too_big = parse_frame_header(huge, declared);
  REQUIRE(too_big);
  CHECK(too_big->find("declared a join message of 65535 bytes; the limit is 4096") != std::string::npos);
  const unsigned char limit[] = {'T', 'R', 'P', '1', 0x10, 0x00};
  CHECK(!parse_frame_header(limit, declared));
  CHECK(declared == kMaxFrameBytes);

  CHECK(parse_frame_payload("kind=hello", back)->find("no end") != std::string::npos);
  CHECK(parse_frame_payload("kindhello\n", back)->find("no '='") != std::string::npos);
  CHECK(parse_frame_payload("Kind=x\n", back)->find("malformed key") != std::string::npos);
  CHECK(parse_frame_payload("a=1\na=2\n", back)->find("given twice") != std::string::npos);
  std::string many;
  for (char c = 'a'; c <= 'z'; ++c) many += std::string(1, c) + "=1\n" + std::string(2, c) + "=1\n";
  CHECK(parse_frame_payload(many, back)->find("more than 32 fields") != std::string::npos);
  CHECK_THROWS_AS(encode_frame({{"kind", std::string(5000, 'x')}}), std::invalid_argument);
  CHECK_THROWS_AS(encode_frame({{"kind", "a\nb"}}), std::invalid_argument);

  JoinHello h;
  FrameFields f = to_fields(a_hello());
  f["pid"] = "12x";
  CHECK(from_fields(f, h)->find("field 'pid' is not a number") != std::string::npos);
  f.erase("pid");
  CHECK(from_fields(f, h)->find("field 'pid' missing") != std::string::npos);
  CHECK(printable("ok\x1b[31mred\r", 64) == "ok?[31mred?");
  CHECK(printable(std::string(100, 'h'), 8) == "hhhhhhhh...");
  JoinProof p;
  CHECK(from_fields(to_fields(a_hello()), p)->find("expected a 'proof' message, got 'hello'") != std::string::npos);
}

TEST_CASE("the gate admits a worker that proves the secret, once; its ticket redeems once") {
  TestGate g;
  const auto hello = a_hello();
  const auto c = join(g.gate->port(), kSecret, hello);
  REQUIRE(c.got_verdict);
  CHECK(c.challenge.ok);
  // The supervisor proved the secret too, over the worker's nonce.
  CHECK(c.challenge.proof ==
        hmac_sha256_hex(kSecret, supervisor_join_text(c.challenge.nonce, hello.nonce, c.challenge.workdir, "")));
  CHECK(c.verdict.ok);
  REQUIRE(c.verdict.ticket.size() == 32);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (g.admissions() == 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(g.admissions() == 1);
  auto a = g.tickets->redeem(c.verdict.ticket);
  REQUIRE(a.has_value());
  CHECK(a->hello.host == "testhost");
  CHECK(a->hello.pid == 42);
  CHECK(a->hello.slots == 2);
  CHECK(a->peer.rfind("127.0.0.1:", 0) == 0);
  CHECK(a->link_fd >= 0);
  ::close(a->link_fd);
  CHECK(!g.tickets->redeem(c.verdict.ticket).has_value());
  CHECK(!g.tickets->redeem("not-a-ticket").has_value());
  CHECK(g.await_refusals(0).empty());
}

TEST_CASE("the gate refuses a wrong secret, a replayed answer, another protocol, config or too few slots") {
  TestGate g;
  size_t admitted = 0;  // only the first of the replayed pair gets in
  SUBCASE("wrong secret") {
    const auto c = join(g.gate->port(), "the-wrong-secret-0123456789");
    REQUIRE(c.got_verdict);
    CHECK(!c.verdict.ok);
    CHECK(c.verdict.reason.find("wrong secret") != std::string::npos);
  }
  SUBCASE("a replayed answer") {
    const auto hello = a_hello();
    std::string recorded;
    const auto first = join(g.gate->port(), kSecret, hello, nullptr, [&](const JoinChallenge& ch, const std::string& b) {
      return recorded = hmac_sha256_hex(kSecret, worker_join_text(ch.nonce, hello.nonce, b));
    });
    REQUIRE(first.verdict.ok);
    admitted = 1;
    const auto again =
        join(g.gate->port(), kSecret, hello, nullptr, [&](const JoinChallenge&, const std::string&) { return recorded; });
    REQUIRE(again.got_verdict);
    CHECK(!again.verdict.ok);
    CHECK(again.verdict.reason.find("replays an answer") != std::string::npos);
  }
  SUBCASE("another protocol version") {
    auto h = a_hello();
    h.protocol = 99;
    const auto c = join(g.gate->port(), kSecret, h);
    REQUIRE(c.got_challenge);
    CHECK(!c.challenge.ok);
    CHECK(c.challenge.reason.find("protocol version 99, this supervisor speaks 4") != std::string::npos);
  }
  SUBCASE("another config") {
    auto h = a_hello();
    h.config_hash = 0x9999;
    const auto c = join(g.gate->port(), kSecret, h);
    REQUIRE(c.got_challenge);
    CHECK(c.challenge.reason.find("config hash 0000000000009999 differs") != std::string::npos);
  }
  SUBCASE("no slots") {
    auto h = a_hello();
    h.slots = 0;
    const auto c = join(g.gate->port(), kSecret, h);
    REQUIRE(c.got_challenge);
    CHECK(c.challenge.reason.find("0 slot(s)") != std::string::npos);
  }
  const auto refusals = g.await_refusals(1);
  REQUIRE(refusals.size() == 1);
  CHECK(refusals[0].first.find("(testhost pid 42)") != std::string::npos);
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (g.admissions() < admitted && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(g.admissions() == admitted);
}

TEST_CASE("a connection that does not finish the handshake in time is closed, with the reason") {
  GateOptions o;
  o.handshake_timeout = std::chrono::milliseconds(300);
  TestGate g(o);
  const int silent = dial(g.gate->port());
  const int slow = dial(g.gate->port());
  const auto frame = encode_frame(to_fields(a_hello()));
  ::send(slow, frame.data(), 10, MSG_NOSIGNAL);  // a truncated hello
  CHECK(closed_by_peer(silent, std::chrono::seconds(10)));
  CHECK(closed_by_peer(slow, std::chrono::seconds(10)));
  const auto refusals = g.await_refusals(2);
  REQUIRE(refusals.size() == 2);
  for (const auto& [who, why] : refusals) CHECK(why.find("did not finish the join handshake within 0.3 s") != std::string::npos);
  ::close(silent);
  ::close(slow);
}

TEST_CASE("a header declaring more than the limit, or bytes of another protocol, are refused at once") {
  TestGate g;
  const int big = dial(g.gate->port());
  ::send(big, "TRP1\xff\xff", 6, MSG_NOSIGNAL);
  const int http = dial(g.gate->port());
  const std::string get = "GET / HTTP/1.1\r\n\r\n";
  ::send(http, get.data(), get.size(), MSG_NOSIGNAL);
  const int quiet_quit = dial(g.gate->port());
  ::close(quiet_quit);
  CHECK(closed_by_peer(big, std::chrono::seconds(10)));
  CHECK(closed_by_peer(http, std::chrono::seconds(10)));
  auto refusals = g.await_refusals(3);
  REQUIRE(refusals.size() == 3);
  std::string all;
  for (const auto& [who, why] : refusals) all += why + "\n";
  CHECK(all.find("declared a join message of 65535 bytes") != std::string::npos);
  CHECK(all.find("first bytes 47 45 54 20") != std::string::npos);
  CHECK(all.find("without sending anything") != std::string::npos);
  ::close(big);
  ::close(http);
  // The gate still admits a worker afterwards.
  CHECK(join(g.gate->port(), kSecret).verdict.ok);
}

TEST_CASE("beyond max_pending unauthenticated connections, the next one is closed at once; workers join after") {
  GateOptions o;
  o.max_pending = 4;
  o.handshake_timeout = std::chrono::seconds(30);
  TestGate g(o);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(dial(g.gate->port()));
  // Connections are accepted in the order they arrive: the fifth finds four pending.
  const int extra = dial(g.gate->port());
  CHECK(closed_by_peer(extra, std::chrono::seconds(10)));
  const auto refusals = g.await_refusals(1);
  REQUIRE(refusals.size() == 1);
  CHECK(refusals[0].second.find("4 connections are already in the join handshake (the limit)") != std::string::npos);
  ::close(extra);
  for (int fd : held) ::close(fd);
  // Each frees its slot once the gate has seen it go (one refusal each).
  CHECK(g.await_refusals(5).size() == 5);
  const auto c = join(g.gate->port(), kSecret);
  CHECK(c.verdict.ok);
}

namespace {

// A CA and two certificates it signs (and one from another CA), made with the openssl
// command; empty when it is not installed.
struct Pki {
  fs::path dir;
  bool ok = false;
  TlsOptions side(const std::string& name, const std::string& ca = "ca") const {
    return {true, (dir / (name + ".crt")).string(), (dir / (name + ".key")).string(), (dir / (ca + ".crt")).string()};
  }
};
Pki make_pki() {
  Pki p;
  p.dir = fs::temp_directory_path() / ("troupe-gate-pki-" + std::to_string(::getpid()));
  fs::create_directories(p.dir);
  const auto d = p.dir.string();
  auto sh = [&](const std::string& cmd) { return std::system(("cd " + d + " && " + cmd + " >/dev/null 2>&1").c_str()) == 0; };
  const auto ca = [&](const std::string& name) {
    return sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=" + name +
              " -keyout " + name + ".key -out " + name + ".crt");
  };
  const auto cert = [&](const std::string& name, const std::string& by) {
    return sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + name + " -keyout " +
              name + ".key -out " + name + ".csr") &&
           sh("openssl x509 -req -in " + name + ".csr -CA " + by + ".crt -CAkey " + by + ".key -CAcreateserial -days 2 -out " +
              name + ".crt");
  };
  p.ok = sh("command -v openssl") && ca("ca") && ca("otherca") && cert("supervisor", "ca") && cert("worker", "ca") &&
         cert("stranger", "otherca");
  return p;
}

}  // namespace

TEST_CASE("TLS: anonymous sessions are bound into the proofs; with certificates a peer without one fails the handshake") {
  SUBCASE("anonymous") {
    GateOptions o;
    o.tls = make_tls_context(TlsOptions{true, "", "", ""}, true);
    TestGate g(o);
    auto client = make_tls_context(TlsOptions{true, "", "", ""}, false);
    const auto c = join(g.gate->port(), kSecret, a_hello(), client.get());
    REQUIRE(c.got_verdict);
    CHECK(c.verdict.ok);
    CHECK(c.binding.size() == 64);
    // An answer computed for another session (a relay between two TLS sessions) fails.
    const auto relayed = join(g.gate->port(), kSecret, a_hello(), client.get(),
                              [&](const JoinChallenge& ch, const std::string&) {
                                return hmac_sha256_hex(kSecret, worker_join_text(ch.nonce, "x", c.binding));
                              });
    CHECK(!relayed.verdict.ok);
    // A plaintext client fails the TLS handshake.
    const auto plain = join(g.gate->port(), kSecret);
    CHECK(!plain.got_challenge);
    const auto refusals = g.await_refusals(2);
    REQUIRE(refusals.size() == 2);
    CHECK(refusals[1].second.find("TLS handshake failed") != std::string::npos);
  }
  SUBCASE("certificates") {
    const auto pki = make_pki();
    if (!pki.ok) {
      MESSAGE("skipped: the openssl command could not make test certificates");
      return;
    }
    GateOptions o;
    o.tls = make_tls_context(pki.side("supervisor"), true);
    TestGate g(o);
    auto worker = make_tls_context(pki.side("worker"), false);
    CHECK(join(g.gate->port(), kSecret, a_hello(), worker.get()).verdict.ok);
    // No certificate, or one from another CA: the TLS handshake fails, nothing is read.
    auto anonymous = make_tls_context(TlsOptions{true, "", "", ""}, false);
    CHECK(!join(g.gate->port(), kSecret, a_hello(), anonymous.get()).got_challenge);
    auto stranger = make_tls_context(pki.side("stranger", "ca"), false);
    CHECK(!join(g.gate->port(), kSecret, a_hello(), stranger.get()).got_challenge);
    const auto refusals = g.await_refusals(2);
    REQUIRE(refusals.size() == 2);
    for (const auto& [who, why] : refusals) CHECK(why.find("TLS handshake failed") != std::string::npos);
    CHECK_THROWS_WITH_AS(make_tls_context(TlsOptions{true, pki.side("worker").certificate, "", ""}, false),
                         "--tls-cert, --tls-key and --tls-ca go together: give all three or none", std::runtime_error);
    CHECK_THROWS_AS(make_tls_context(TlsOptions{true, "/nonexistent.crt", pki.side("worker").key, pki.side("worker").ca_file}, true),
                    std::runtime_error);
    std::error_code ec;
    fs::remove_all(pki.dir, ec);
  }
}
