// The network side of a cluster run, shared by the supervisor and the workers: the
// CAF system configuration (io middleman, heartbeats, the wire types, optional TLS
// through CAF's OpenSSL module) and the calls that listen and connect with or
// without TLS.
//
// Heartbeats: both sides send a BASP heartbeat every `heartbeat` and drop a
// connection that stayed silent for `connection_timeout` (CAF 0.17 keys
// middleman.heartbeat-interval / middleman.connection-timeout; both sides must send,
// or the silent side's healthy connection is dropped).
//
// TLS (optional, both sides alike): with a certificate, key and CA file each side
// proves its identity to the other with a certificate signed by that CA; without
// them CAF falls back to anonymous ECDH (encrypted, but unauthenticated: the
// challenge-response of actors/cluster_auth.h is then the only proof). Only the CAF
// connection is encrypted; Gloo's tensor traffic is plain TCP.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/all.hpp>

namespace troupe::actors {

struct TlsOptions {
  bool enabled = false;
  std::string certificate;  // PEM certificate chain of this side ("" : anonymous)
  std::string key;          // its PEM private key
  std::string ca_file;      // PEM CA that signed the peer's certificate
};

struct NetOptions {
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds connection_timeout{5000};
  TlsOptions tls;
};

// Loads the middleman (and the OpenSSL module with TLS), sets heartbeats and the
// scheduler size, and registers every wire type. Throws std::runtime_error when TLS
// is asked for but CAF's OpenSSL module is not available.
void configure_network(caf::actor_system_config& cfg, const NetOptions& options);

// Publishes `actor` on host:port (port 0: any free one); returns the bound port.
// Throws std::runtime_error naming the address.
uint16_t listen_on(caf::actor_system& sys, const caf::actor& actor, const std::string& host, uint16_t port,
                   bool tls);

// Connects to the actor published at host:port. Throws std::runtime_error naming
// the address and CAF's reason.
caf::actor connect_to(caf::actor_system& sys, const std::string& host, uint16_t port, bool tls);

// "host:port" -> (host, port); throws std::invalid_argument naming `flag` and the text.
std::pair<std::string, uint16_t> parse_address(const std::string& text, const std::string& flag);

}  // namespace troupe::actors
