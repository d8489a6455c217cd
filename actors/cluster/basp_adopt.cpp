#include "actors/cluster/basp_adopt.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <stdexcept>
#include <string>

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <fmt/format.h>
#include <openssl/err.h>

namespace troupe::actors {
namespace {

namespace net = caf::io::network;

// CAF's stream calls these for every read and write of a TLS link. Want-read and
// want-write count as success with no bytes: the multiplexer polls the socket again.
// SSL_pending: TLS may hold decrypted bytes the socket no longer signals.
class TlsPolicy {
 public:
  explicit TlsPolicy(std::shared_ptr<SSL> ssl) : ssl_(std::move(ssl)) {}

  net::rw_state read_some(size_t& result, net::native_socket, void* buf, size_t len) {
    return transfer(result, len, [&] { return SSL_read(ssl_.get(), buf, int(len)); });
  }
  net::rw_state write_some(size_t& result, net::native_socket, const void* buf, size_t len) {
    return transfer(result, len, [&] { return SSL_write(ssl_.get(), buf, int(len)); });
  }
  bool try_accept(net::native_socket&, net::native_socket) { return false; }  // no doorman
  bool must_read_more(net::native_socket, size_t threshold) { return size_t(SSL_pending(ssl_.get())) >= threshold; }

 private:
  template <class Call>
  net::rw_state transfer(size_t& result, size_t len, Call call) {
    result = 0;
    if (len == 0) return net::rw_state::indeterminate;
    ERR_clear_error();
    const int r = call();
    if (r > 0) {
      result = size_t(r);
      return net::rw_state::success;
    }
    const int e = SSL_get_error(ssl_.get(), r);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? net::rw_state::success : net::rw_state::failure;
  }
  std::shared_ptr<SSL> ssl_;
};

// A CAF scribe (one connection of a broker) over TlsPolicy.
class TlsScribe : public caf::io::scribe {
 public:
  TlsScribe(net::default_multiplexer& mpx, net::native_socket fd, std::shared_ptr<SSL> ssl)
      : caf::io::scribe(net::conn_hdl_from_socket(fd)), stream_(mpx, fd, TlsPolicy(std::move(ssl))) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) {
      launched_ = true;
      stream_.start(this);
      stream_.force_empty_write(this);
    }
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto a = net::remote_addr_of_fd(stream_.fd());
    return a ? *a : std::string();
  }
  uint16_t port() const override {
    auto p = net::remote_port_of_fd(stream_.fd());
    return p ? *p : uint16_t(0);
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  bool launched_ = false;
  net::stream_impl<TlsPolicy> stream_;
};

caf::io::scribe_ptr make_scribe(caf::actor_system& sys, int fd, std::shared_ptr<SSL> tls) {
  auto& backend = sys.middleman().backend();
  if (!tls) return backend.new_scribe(fd);
  return caf::make_counted<TlsScribe>(static_cast<net::default_multiplexer&>(backend), fd, std::move(tls));
}

caf::actor basp_broker(caf::actor_system& sys) {
  return sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

}  // namespace

void adopt_as_server(caf::actor_system& sys, int fd, std::shared_ptr<SSL> tls, uint16_t port,
                     const caf::actor& published) {
  caf::anon_send(basp_broker(sys), caf::publish_atom::value, make_scribe(sys, fd, std::move(tls)), port,
                 caf::actor_cast<caf::strong_actor_ptr>(published), std::set<std::string>{});
}

caf::actor adopt_as_client(caf::actor_system& sys, int fd, std::shared_ptr<SSL> tls, uint16_t port,
                           std::chrono::milliseconds timeout) {
  // A duplicate of the socket, to drop the connection should the handshake fail (CAF
  // closes its own descriptor, whose number may then be reused).
  const int spare_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  caf::scoped_actor self{sys};
  caf::actor peer;
  std::string error = "the supervisor published no actor";
  self->request(basp_broker(sys), timeout, caf::connect_atom::value, make_scribe(sys, fd, std::move(tls)), port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& published, std::set<std::string>&) {
            peer = caf::actor_cast<caf::actor>(published);
          },
          [&](caf::error& e) { error = sys.render(e); });
  if (spare_fd >= 0) {
    if (!peer) ::shutdown(spare_fd, SHUT_RDWR);
    ::close(spare_fd);
  }
  if (!peer) throw std::runtime_error("the CAF handshake after joining failed: " + error);
  return peer;
}

}  // namespace troupe::actors
