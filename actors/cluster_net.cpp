#include "actors/cluster_net.h"

#include <stdexcept>
#include <thread>

#include <caf/io/all.hpp>
#ifdef TROUPE_HAVE_CAF_OPENSSL
#include <caf/openssl/all.hpp>
#endif
#include <fmt/format.h>

#include "actors/scheduler_config.h"
#include "actors/wire_types.h"

namespace troupe::actors {

void configure_network(caf::actor_system_config& cfg, const NetOptions& o) {
  configure_scheduler(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{o.heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{o.connection_timeout});
  if (o.tls.enabled) {
#ifdef TROUPE_HAVE_CAF_OPENSSL
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = o.tls.certificate;
    cfg.openssl_key = o.tls.key;
    cfg.openssl_cafile = o.tls.ca_file;
#else
    throw std::runtime_error("--tls: this build has no CAF OpenSSL module (install libcaf-dev's libcaf-openssl)");
#endif
  }
  wire::add_wire_types(cfg);
}

uint16_t listen_on(caf::actor_system& sys, const caf::actor& actor, const std::string& host, uint16_t port,
                   bool tls) {
  caf::expected<uint16_t> bound{caf::sec::runtime_error};
  if (tls) {
#ifdef TROUPE_HAVE_CAF_OPENSSL
    bound = caf::openssl::publish(actor, port, host.c_str(), true);
#endif
  } else {
    bound = sys.middleman().publish(actor, port, host.c_str(), true);
  }
  if (!bound)
    throw std::runtime_error(
        fmt::format("cannot listen on {}:{}{}: {}", host, port, tls ? " (TLS)" : "", sys.render(bound.error())));
  return *bound;
}

caf::actor connect_to(caf::actor_system& sys, const std::string& host, uint16_t port, bool tls) {
  caf::expected<caf::actor> a{caf::sec::runtime_error};
  if (tls) {
#ifdef TROUPE_HAVE_CAF_OPENSSL
    a = caf::openssl::remote_actor(sys, host, port);
#endif
  } else {
    a = sys.middleman().remote_actor(host, port);
  }
  if (!a)
    throw std::runtime_error(
        fmt::format("cannot connect to {}:{}{}: {}", host, port, tls ? " (TLS)" : "", sys.render(a.error())));
  return *a;
}

std::pair<std::string, uint16_t> parse_address(const std::string& text, const std::string& flag) {
  const auto colon = text.rfind(':');
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format("{} {}: {} (expected ADDR:PORT, e.g. 127.0.0.1:7777)", flag, text, why));
  };
  if (colon == std::string::npos || colon == 0) throw bad("no ADDR:PORT");
  const auto port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.find_first_not_of("0123456789") != std::string::npos) throw bad("bad port");
  const unsigned long port = std::stoul(port_text);
  if (port > 65535) throw bad("port above 65535");
  auto host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, uint16_t(port)};
}

}  // namespace troupe::actors
