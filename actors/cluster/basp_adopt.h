// Handing a socket that passed the join handshake (actors/cluster/cluster_gate.h,
// actors/cluster/join_client.h) to CAF 0.17's BASP broker, with or without its TLS session:
// from then on the connection is an ordinary middleman link (actor messages,
// heartbeats, remote monitors).
//
// CAF 0.17's broker takes an existing connection in two messages it serves for this
// purpose: (publish_atom, scribe, port, actor, interface) makes it the accepting side,
// which sends the server handshake and offers `actor` as the one published on `port`;
// (connect_atom, scribe, port) makes it the connecting side, whose reply is the
// peer's node, published actor and interface. With TLS the scribe reads and writes
// through troupe's TLS session (TlsScribe in basp_adopt.cpp), not CAF's OpenSSL module.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <caf/all.hpp>
#include <openssl/ssl.h>

namespace troupe::actors {

// The supervisor's side: `fd` (non-blocking) is CAF's from now on.
void adopt_as_server(caf::actor_system& sys, int fd, std::shared_ptr<SSL> tls, uint16_t port,
                     const caf::actor& published);

// A worker's side: returns the actor the supervisor publishes. Throws
// std::runtime_error when the BASP handshake does not complete within `timeout`.
caf::actor adopt_as_client(caf::actor_system& sys, int fd, std::shared_ptr<SSL> tls, uint16_t port,
                           std::chrono::milliseconds timeout);

}  // namespace troupe::actors
