// One side of the join handshake on a non-blocking socket, with or without TLS
// (actors/cluster/join_protocol.h, actors/cluster/tls_context.h). Every call does what it can without
// blocking and says what it waits for, so the supervisor's gate drives many channels
// from one poll loop and a worker drives its one with a deadline (drive()).
//
// Reads take exactly the bytes of the frame in progress (header, then the payload it
// declares, at most kMaxFrameBytes), never more: whatever follows the handshake stays
// in the socket (or in the TLS session) for CAF. The channel does not own the socket.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <openssl/ssl.h>

#include "actors/cluster/join_protocol.h"

namespace troupe::actors {

enum class Io { done, want_read, want_write, failed };

class JoinChannel {
 public:
  JoinChannel(int fd, std::shared_ptr<SSL> tls);

  // The TLS handshake (done at once without TLS).
  Io handshake();
  // Reads toward the next frame; done when `out` holds it.
  Io read_frame(FrameFields& out);
  // Queues a frame; flush() writes what is queued.
  void send(const FrameFields& fields);
  Io flush();

  // Why the last call failed ("the peer closed the connection", a TLS error, a bad frame).
  const std::string& error() const { return error_; }
  // Bytes read so far: 0 means the peer never sent anything.
  size_t bytes_read() const { return bytes_read_; }
  // The TLS channel binding, "" without TLS.
  std::string binding() const;
  int fd() const { return fd_; }
  const std::shared_ptr<SSL>& tls() const { return tls_; }

 private:
  Io read_some(void* into, size_t n, size_t& got);
  Io fail(std::string why);

  int fd_;
  std::shared_ptr<SSL> tls_;
  unsigned char header_[kFrameHeaderBytes] = {};
  size_t header_got_ = 0;
  std::string payload_;
  size_t payload_got_ = 0;
  bool in_payload_ = false;
  std::string out_;
  size_t out_at_ = 0;
  size_t bytes_read_ = 0;
  std::string error_;
};

using Deadline = std::chrono::steady_clock::time_point;

// Repeats `step` (waiting with poll(2) on `fd` for what it asks) until it returns done
// or failed; failed with `timed_out` set once `deadline` passes.
Io drive(int fd, const std::function<Io()>& step, Deadline deadline, bool& timed_out);

// Sets O_NONBLOCK; throws std::runtime_error on failure.
void set_nonblocking(int fd);

}  // namespace troupe::actors
