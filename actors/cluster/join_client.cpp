#include "actors/cluster/join_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "actors/cluster/basp_adopt.h"
#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/join_channel.h"
#include "actors/cluster/tls_context.h"
#include "util/sigpipe.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = KnockResult::Kind;

// A connected non-blocking TCP socket, or -1 with `error` set.
int connect_before(const std::string& host, uint16_t port, Deadline deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found)) {
    error = ::gai_strerror(e);
    return -1;
  }
  error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLOUT, 0};
      int soerr = ETIMEDOUT;
      if (left > 0 && ::poll(&p, 1, int(left)) == 1) {
        socklen_t len = sizeof soerr;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
      }
      r = soerr == 0 ? 0 : -1;
      errno = soerr;
    }
    if (r != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

KnockResult knock(caf::actor_system& sys, const KnockOptions& o) {
  util::ignore_sigpipe();  // TLS writes to a supervisor that hung up
  const auto deadline = Clock::now() + o.attempt_timeout;
  const auto where = fmt::format("{}:{}{}", o.host, o.port, o.tls ? " (TLS)" : "");
  KnockResult out;
  std::string error;
  const int fd = connect_before(o.host, o.port, deadline, error);
  if (fd < 0) {
    out.message = fmt::format("cannot connect to {}: {}", where, error);
    return out;
  }
  bool handed_over = false;
  struct CloseUnlessHanded {
    int fd;
    bool& handed;
    ~CloseUnlessHanded() {
      if (!handed) ::close(fd);
    }
  } guard{fd, handed_over};

  std::shared_ptr<SSL> tls;
  try {
    if (o.tls) tls = new_tls_session(o.tls.get(), fd, /*server=*/false);
  } catch (const std::exception& e) {
    out.message = fmt::format("cannot connect to {}: {}", where, e.what());
    return out;
  }
  JoinChannel ch(fd, tls);
  bool timed_out = false;
  const auto broke = [&](const char* when) {
    out.kind = Kind::unreachable;
    out.message = fmt::format("cannot connect to {}: {} {}", where,
                              timed_out ? "no answer in time" : ch.error(), when);
    return out;
  };
  if (drive(fd, [&] { return ch.handshake(); }, deadline, timed_out) != Io::done) return broke("(TLS handshake)");
  const auto binding = ch.binding();
  JoinHello hello = o.hello;
  hello.nonce = random_hex(32);
  ch.send(to_fields(hello));
  if (drive(fd, [&] { return ch.flush(); }, deadline, timed_out) != Io::done) return broke("(sending hello)");
  FrameFields f;
  if (drive(fd, [&] { return ch.read_frame(f); }, deadline, timed_out) != Io::done)
    return broke("(waiting for the challenge)");
  JoinChallenge challenge;
  if (auto bad = from_fields(f, challenge)) {
    out.message = fmt::format("cannot connect to {}: a malformed challenge: {}", where, *bad);
    return out;
  }
  if (!challenge.ok) {
    out.kind = Kind::refused;
    out.message = fmt::format("refused by the supervisor at {}: {}", where, challenge.reason);
    return out;
  }
  // Relative paths in the config resolve in the supervisor's working directory: it must
  // exist here too (one machine, or a shared file system mounted at the same path).
  if (!challenge.workdir.empty() && !std::filesystem::is_directory(challenge.workdir)) {
    out.kind = Kind::unusable;
    out.message = fmt::format(
        "the config has relative paths (run directory, checkpoints or data) and the supervisor resolves them in {}, "
        "which does not exist on this machine ({}): mount the shared file system at the same path, or give the "
        "config absolute paths; not joining",
        challenge.workdir, hello.host);
    return out;
  }
  // The proof goes first, so that a worker with a wrong secret is refused (and logged)
  // by the supervisor; the supervisor's own proof is checked before anything is handed
  // to CAF, let alone hosted.
  ch.send(to_fields(JoinProof{hmac_sha256_hex(o.secret, worker_join_text(challenge.nonce, hello.nonce, binding))}));
  if (drive(fd, [&] { return ch.flush(); }, deadline, timed_out) != Io::done) return broke("(sending the proof)");
  if (drive(fd, [&] { return ch.read_frame(f); }, deadline, timed_out) != Io::done)
    return broke("(waiting for the verdict)");
  JoinVerdict verdict;
  if (auto bad = from_fields(f, verdict)) {
    out.message = fmt::format("cannot connect to {}: a malformed verdict: {}", where, *bad);
    return out;
  }
  if (!verdict.ok) {
    out.kind = Kind::refused;
    out.message = fmt::format("refused by the supervisor at {}: {}", where, verdict.reason);
    return out;
  }
  const auto expected =
      hmac_sha256_hex(o.secret, supervisor_join_text(challenge.nonce, hello.nonce, challenge.workdir, binding));
  if (!same_secret_text(expected, challenge.proof)) {
    out.kind = Kind::refused;
    out.message = fmt::format("the supervisor at {} could not prove it knows this run's secret; not hosting anything",
                              where);
    return out;
  }
  handed_over = true;
  try {
    const auto left = std::max(std::chrono::milliseconds(1000),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    out.registrar = adopt_as_client(sys, fd, tls, o.port, left);
  } catch (const std::exception& e) {
    out.message = fmt::format("cannot connect to {}: {}", where, e.what());
    return out;
  }
  out.kind = Kind::joined;
  out.ticket = verdict.ticket;
  out.workdir = challenge.workdir;
  return out;
}

}  // namespace troupe::actors
