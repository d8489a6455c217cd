// The supervisor's door (cluster mode, docs/cluster.md "Security"): troupe's own
// listening socket, in front of CAF. Every connection runs the join handshake
// (actors/cluster/join_protocol.h; with TLS, the TLS handshake first) on the gate's own
// thread, under hard limits:
//
//   every pre-authentication message   at most kMaxFrameBytes (a declared length above
//                                       it is refused before anything is allocated)
//   the whole handshake (TLS included) within GateOptions::handshake_timeout
//   unauthenticated connections        at most GateOptions::max_pending at once; one
//                                       more is closed at once
//
// Only a connection that proved the run's secret is handed to CAF (GateOptions::admit),
// so CAF's middleman, whose I/O loop carries every established worker link, never
// reads a byte from a stranger. Every refusal is one log line naming the peer's
// address and the reason.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <openssl/ssl.h>

#include "actors/cluster/join_protocol.h"

namespace troupe::actors {

// A connection that passed the join handshake, until its JoinRequest redeems the ticket.
struct Admission {
  JoinHello hello;
  std::string peer;  // "ADDR:PORT" of the connection
  // A duplicate of the socket CAF now owns: shutting it down drops the worker's link
  // (actors/cluster/link_watch.h). Whoever redeems the admission owns it.
  int link_fd = -1;
  std::chrono::steady_clock::time_point at;
};

// Tickets of admitted connections: each redeemed once, unredeemed ones expire (their
// link fd closed) after a minute.
class JoinTickets {
 public:
  ~JoinTickets();
  std::string issue(Admission a);
  std::optional<Admission> redeem(const std::string& ticket);
  void cancel(const std::string& ticket);  // redeem and close its link fd

 private:
  void expire_locked(std::chrono::steady_clock::time_point now);
  std::mutex mu_;
  std::map<std::string, Admission> open_;
};

struct GateOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  std::string secret;
  int32_t protocol = 0;      // the cluster protocol version workers must speak
  uint64_t config_hash = 0;  // compared with a worker's when it has a config
  std::string workdir;       // JoinChallenge::workdir
  std::shared_ptr<SSL_CTX> tls;  // null: plain TCP
  std::chrono::milliseconds handshake_timeout{10000};
  size_t max_pending = 32;
  std::shared_ptr<JoinTickets> tickets;
  // Called on the gate's thread with an admitted socket and its TLS session (null on
  // plain TCP); it owns the socket from then on (actors/cluster/basp_adopt.h hands it to CAF).
  std::function<void(int fd, std::shared_ptr<SSL> tls)> admit;
  // Every refusal: who (peer address, and the worker's host and pid when it said
  // hello) and why. Called on the gate's thread.
  std::function<void(const std::string& who, const std::string& why)> on_refused;
};

class Gate {
 public:
  // Binds and listens, then starts the gate's thread. Throws std::runtime_error naming
  // the address when it cannot listen.
  explicit Gate(GateOptions options);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  uint16_t port() const { return port_; }
  // Stops accepting and closes every connection still in its handshake. Idempotent.
  void stop();

 private:
  struct Pending;
  void loop();
  void accept_all();
  void progress(Pending& c);
  void refuse(Pending& c, const std::string& why);
  // Logs (the first RefusalLog::kKept, then one line per kLogEvery) and reports it.
  void note_refusal(const std::string& who, const std::string& why);

  GateOptions o_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Pending>> pending_;
  int64_t refused_ = 0;  // connections refused so far (the gate's thread only)
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::thread thread_;
};

}  // namespace troupe::actors
