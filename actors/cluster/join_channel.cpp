#include "actors/cluster/join_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <openssl/err.h>

#include "actors/cluster/tls_context.h"

namespace troupe::actors {

JoinChannel::JoinChannel(int fd, std::shared_ptr<SSL> tls) : fd_(fd), tls_(std::move(tls)) {}

Io JoinChannel::fail(std::string why) {
  error_ = std::move(why);
  return Io::failed;
}

Io JoinChannel::handshake() {
  if (!tls_) return Io::done;
  ERR_clear_error();
  const int r = SSL_do_handshake(tls_.get());
  if (r == 1) return Io::done;
  switch (SSL_get_error(tls_.get(), r)) {
    case SSL_ERROR_WANT_READ: return Io::want_read;
    case SSL_ERROR_WANT_WRITE: return Io::want_write;
    case SSL_ERROR_SYSCALL:
    case SSL_ERROR_ZERO_RETURN: {
      const auto detail = tls_error_text();
      return fail("TLS handshake failed: the peer closed the connection" + (detail.empty() ? "" : ": " + detail));
    }
    default: return fail("TLS handshake failed: " + tls_error_text());
  }
}

Io JoinChannel::read_some(void* into, size_t n, size_t& got) {
  got = 0;
  if (tls_) {
    ERR_clear_error();
    const int r = SSL_read(tls_.get(), into, int(n));
    if (r > 0) {
      got = size_t(r);
      bytes_read_ += got;
      return Io::done;
    }
    switch (SSL_get_error(tls_.get(), r)) {
      case SSL_ERROR_WANT_READ: return Io::want_read;
      case SSL_ERROR_WANT_WRITE: return Io::want_write;
      case SSL_ERROR_ZERO_RETURN: return fail("the peer closed the connection");
      default: {
        const auto detail = tls_error_text();
        return fail("TLS read failed" + (detail.empty() ? std::string(": the peer closed the connection") : ": " + detail));
      }
    }
  }
  for (;;) {
    const ssize_t r = ::recv(fd_, into, n, 0);
    if (r > 0) {
      got = size_t(r);
      bytes_read_ += got;
      return Io::done;
    }
    if (r == 0) return fail("the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::want_read;
    return fail(std::string("recv: ") + std::strerror(errno));
  }
}

Io JoinChannel::read_frame(FrameFields& out) {
  for (;;) {
    size_t got = 0;
    if (!in_payload_) {
      const Io io = read_some(header_ + header_got_, kFrameHeaderBytes - header_got_, got);
      if (io != Io::done) return io;
      header_got_ += got;
      if (header_got_ < kFrameHeaderBytes) continue;
      size_t declared = 0;
      if (auto bad = parse_frame_header(header_, declared)) return fail(*bad);
      payload_.assign(declared, '\0');
      payload_got_ = 0;
      in_payload_ = true;
    }
    if (payload_got_ < payload_.size()) {
      const Io io = read_some(payload_.data() + payload_got_, payload_.size() - payload_got_, got);
      if (io != Io::done) return io;
      payload_got_ += got;
      if (payload_got_ < payload_.size()) continue;
    }
    in_payload_ = false;
    header_got_ = 0;
    if (auto bad = parse_frame_payload(payload_, out)) return fail(*bad);
    return Io::done;
  }
}

void JoinChannel::send(const FrameFields& fields) { out_ += encode_frame(fields); }

Io JoinChannel::flush() {
  while (out_at_ < out_.size()) {
    const char* p = out_.data() + out_at_;
    const size_t n = out_.size() - out_at_;
    if (tls_) {
      ERR_clear_error();
      const int r = SSL_write(tls_.get(), p, int(n));
      if (r > 0) {
        out_at_ += size_t(r);
        continue;
      }
      switch (SSL_get_error(tls_.get(), r)) {
        case SSL_ERROR_WANT_READ: return Io::want_read;
        case SSL_ERROR_WANT_WRITE: return Io::want_write;
        default: return fail("TLS write failed: " + tls_error_text());
      }
    }
    const ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (r >= 0) {
      out_at_ += size_t(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::want_write;
    return fail(std::string("send: ") + std::strerror(errno));
  }
  out_.clear();
  out_at_ = 0;
  return Io::done;
}

std::string JoinChannel::binding() const { return tls_ ? tls_binding(tls_.get()) : std::string(); }

Io drive(int fd, const std::function<Io()>& step, Deadline deadline, bool& timed_out) {
  timed_out = false;
  for (;;) {
    const Io io = step();
    if (io == Io::done || io == Io::failed) return io;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      return Io::failed;
    }
    pollfd p{fd, short(io == Io::want_read ? POLLIN : POLLOUT), 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count() + 1, 1000)));
    if (r < 0 && errno != EINTR) return Io::failed;
  }
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error(std::string("fcntl(O_NONBLOCK): ") + std::strerror(errno));
}

}  // namespace troupe::actors
