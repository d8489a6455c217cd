#include "actors/cluster/cluster_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster_auth.h"
#include "actors/cluster/join_channel.h"
#include "actors/cluster/refusal_log.h"
#include "actors/cluster/tls_context.h"
#include "util/sigpipe.h"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTicketLifetime = std::chrono::seconds(60);

std::string address_of(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    port = ntohs(v6->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  return "?";
}

// Binds a listening socket to host:port (port 0: any free one); returns it and the port.
std::pair<int, uint16_t> listen_socket(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const auto service = std::to_string(port);
  if (const int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found))
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}", host, port, ::gai_strerror(e)));
  std::string last = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      const uint16_t p = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      ::freeaddrinfo(found);
      return {fd, p};
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}", host, port, last));
}

}  // namespace

// ---- tickets -----------------------------------------------------------------------

JoinTickets::~JoinTickets() {
  for (auto& [ticket, a] : open_)
    if (a.link_fd >= 0) ::close(a.link_fd);
}

void JoinTickets::expire_locked(Clock::time_point now) {
  for (auto it = open_.begin(); it != open_.end();) {
    if (now - it->second.at > kTicketLifetime) {
      if (it->second.link_fd >= 0) ::close(it->second.link_fd);
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
}

std::string JoinTickets::issue(Admission a) {
  const auto ticket = random_hex(16);
  std::lock_guard lock(mu_);
  expire_locked(a.at);
  open_.emplace(ticket, std::move(a));
  return ticket;
}

std::optional<Admission> JoinTickets::redeem(const std::string& ticket) {
  std::lock_guard lock(mu_);
  expire_locked(Clock::now());
  const auto it = open_.find(ticket);
  if (it == open_.end()) return std::nullopt;
  Admission a = std::move(it->second);
  open_.erase(it);
  return a;
}

void JoinTickets::cancel(const std::string& ticket) {
  if (auto a = redeem(ticket); a && a->link_fd >= 0) ::close(a->link_fd);
}

// ---- the gate ----------------------------------------------------------------------

// One connection in its handshake. Steps in order; each waits for the socket as the
// channel asks.
struct Gate::Pending {
  enum class Step { tls, hello, challenge_out, proof, verdict_out, admitted, closed };
  Pending(int fd_, std::string peer_, std::shared_ptr<SSL> tls, Clock::time_point deadline_)
      : fd(fd_), peer(std::move(peer_)), channel(fd_, std::move(tls)), deadline(deadline_) {}
  int fd;
  std::string peer;
  JoinChannel channel;
  Clock::time_point deadline;
  Step step = Step::tls;
  short wants = POLLIN;
  bool said_hello = false;
  JoinHello hello;
  std::string nonce, binding, refusal, ticket;

  std::string who() const {
    return said_hello ? fmt::format("{} ({} pid {})", peer, hello.host.empty() ? "?" : printable(hello.host), hello.pid)
                      : peer;
  }
};

Gate::Gate(GateOptions options) : o_(std::move(options)) {
  util::ignore_sigpipe();  // TLS writes to a stranger who hung up
  if (!o_.tickets) o_.tickets = std::make_shared<JoinTickets>();
  std::tie(listen_fd_, port_) = listen_socket(o_.host, o_.port);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error(std::string("cluster gate: pipe: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { loop(); });
}

Gate::~Gate() { stop(); }

void Gate::stop() {
  if (stopping_.exchange(true)) return;
  const char byte = 1;
  [[maybe_unused]] const auto n = ::write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
  for (auto& c : pending_) ::close(c->fd);
  pending_.clear();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void Gate::note_refusal(const std::string& who, const std::string& why) {
  ++refused_;
  if (refused_ <= int64_t(RefusalLog::kKept))
    spdlog::warn("cluster: refused {}: {}", who, why);
  else if (RefusalLog::logs_line(refused_))
    spdlog::warn("cluster: {} connections refused so far (one line per {} past the first {}); the latest, {}: {}",
                 refused_, RefusalLog::kLogEvery, RefusalLog::kKept, who, why);
  if (o_.on_refused) o_.on_refused(who, why);
}

void Gate::refuse(Pending& c, const std::string& why) {
  note_refusal(c.who(), why);
  ::close(c.fd);
  c.step = Pending::Step::closed;
}

void Gate::accept_all() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors, say: the listener stays readable, so pause rather than spin.
        spdlog::warn("cluster: accept on port {}: {}; pausing new connections for 200 ms", port_,
                     std::strerror(errno));
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(200);
      }
      return;
    }
    const auto peer = address_of(addr);
    if (pending_.size() >= o_.max_pending) {
      const auto why = fmt::format("{} connections are already in the join handshake (the limit); closed at once",
                                   pending_.size());
      note_refusal(peer, why);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::shared_ptr<SSL> tls;
    try {
      if (o_.tls) tls = new_tls_session(o_.tls.get(), fd, /*server=*/true);
    } catch (const std::exception& e) {
      note_refusal(peer, e.what());
      ::close(fd);
      continue;
    }
    pending_.push_back(std::make_unique<Pending>(fd, peer, std::move(tls), Clock::now() + o_.handshake_timeout));
    progress(*pending_.back());
  }
}

void Gate::progress(Pending& c) {
  using Step = Pending::Step;
  const auto wait = [&](Io io) { c.wants = io == Io::want_write ? POLLOUT : POLLIN; };
  const auto lost = [&](const char* when) {
    const auto& e = c.channel.error();
    refuse(c, c.channel.bytes_read() == 0 && e.find("closed") != std::string::npos
                  ? std::string("it closed the connection without sending anything")
                  : fmt::format("{} {}", e, when));
  };
  for (;;) {
    switch (c.step) {
      case Step::tls: {
        const Io io = c.channel.handshake();
        if (io == Io::failed) return refuse(c, c.channel.error());
        if (io != Io::done) return wait(io);
        c.binding = c.channel.binding();
        c.step = Step::hello;
        break;
      }
      case Step::hello: {
        FrameFields f;
        const Io io = c.channel.read_frame(f);
        if (io == Io::failed) return lost("(before its hello)");
        if (io != Io::done) return wait(io);
        if (auto bad = from_fields(f, c.hello)) return refuse(c, "a malformed hello: " + *bad);
        c.said_hello = true;
        const auto& h = c.hello;
        JoinChallenge ch;
        if (h.protocol != o_.protocol)
          ch.reason = fmt::format("it speaks cluster protocol version {}, this supervisor speaks {}", h.protocol,
                                  o_.protocol);
        else if (h.config_hash != 0 && h.config_hash != o_.config_hash)
          ch.reason = fmt::format(
              "its config hash {:016x} differs from the run's {:016x}: it was started with another config (or other "
              "--set values)",
              h.config_hash, o_.config_hash);
        else if (h.slots < 1)
          ch.reason = fmt::format("it offers {} slot(s); a worker needs at least 1", h.slots);
        else if (h.nonce.size() < 32)
          ch.reason = "its nonce is too short (at least 16 random bytes as hex)";
        if (ch.reason.empty()) {
          ch.ok = true;
          ch.nonce = c.nonce = random_hex(32);
          ch.workdir = o_.workdir;
          ch.proof = hmac_sha256_hex(o_.secret, supervisor_join_text(ch.nonce, h.nonce, ch.workdir, c.binding));
        }
        c.refusal = ch.reason;
        c.channel.send(to_fields(ch));
        c.step = Step::challenge_out;
        break;
      }
      case Step::challenge_out: {
        const Io io = c.channel.flush();
        if (io == Io::failed) return refuse(c, c.refusal.empty() ? c.channel.error() + " (sending the challenge)" : c.refusal);
        if (io != Io::done) return wait(io);
        if (!c.refusal.empty()) return refuse(c, c.refusal);
        c.step = Step::proof;
        break;
      }
      case Step::proof: {
        FrameFields f;
        const Io io = c.channel.read_frame(f);
        if (io == Io::failed) return lost("(before its proof)");
        if (io != Io::done) return wait(io);
        JoinProof p;
        if (auto bad = from_fields(f, p)) return refuse(c, "a malformed proof: " + *bad);
        JoinVerdict v;
        const auto expected = hmac_sha256_hex(o_.secret, worker_join_text(c.nonce, c.hello.nonce, c.binding));
        if (!same_secret_text(expected, p.proof)) {
          v.reason =
              "wrong secret: its answer to the challenge does not match this run's secret (or it replays an answer "
              "to another challenge)";
        } else {
          const int link_fd = ::fcntl(c.fd, F_DUPFD_CLOEXEC, 0);
          if (link_fd < 0) return refuse(c, std::string("cannot duplicate its socket: ") + std::strerror(errno));
          v.ok = true;
          v.ticket = c.ticket = o_.tickets->issue(Admission{c.hello, c.peer, link_fd, Clock::now()});
        }
        c.refusal = v.reason;
        c.channel.send(to_fields(v));
        c.step = Step::verdict_out;
        break;
      }
      case Step::verdict_out: {
        const Io io = c.channel.flush();
        if (io == Io::failed) {
          if (!c.ticket.empty()) o_.tickets->cancel(c.ticket);
          return refuse(c, c.refusal.empty() ? c.channel.error() + " (sending the verdict)" : c.refusal);
        }
        if (io != Io::done) return wait(io);
        if (!c.refusal.empty()) return refuse(c, c.refusal);
        spdlog::info("cluster: {} proved the run's secret; handing its connection to CAF", c.who());
        c.step = Step::admitted;
        try {
          o_.admit(c.fd, c.channel.tls());
        } catch (const std::exception& e) {
          spdlog::error("cluster: cannot hand {}'s connection to CAF: {}", c.who(), e.what());
          o_.tickets->cancel(c.ticket);
          ::close(c.fd);
        }
        return;
      }
      case Step::admitted:
      case Step::closed: return;
    }
  }
}

void Gate::loop() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    const auto now = Clock::now();
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({listen_fd_, short(accepting ? POLLIN : 0), 0});
    auto next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until_);
    for (const auto& c : pending_) {
      fds.push_back({c->fd, c->wants, 0});
      next = std::min(next, c->deadline);
    }
    const auto wait_ms = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
    const int r = ::poll(fds.data(), fds.size(), int(wait_ms));
    if (r < 0 && errno != EINTR) {
      spdlog::error("cluster gate: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (stopping_.load()) break;
    // Pending connections first (their slots in `fds` follow the listener's), then new ones.
    for (size_t i = 0; i < pending_.size(); ++i)
      if (fds[2 + i].revents) progress(*pending_[i]);
    const auto after = Clock::now();
    for (auto& c : pending_)
      if ((c->step != Pending::Step::admitted && c->step != Pending::Step::closed) && after >= c->deadline)
        refuse(*c, fmt::format("it did not finish the join handshake within {:g} s ({} byte(s) received)",
                               o_.handshake_timeout.count() / 1000.0, c->channel.bytes_read()));
    std::erase_if(pending_, [](const auto& c) {
      return c->step == Pending::Step::admitted || c->step == Pending::Step::closed;
    });
    if (fds[1].revents & POLLIN) accept_all();
  }
}

}  // namespace troupe::actors
