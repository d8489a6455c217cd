// The network side of a cluster run, shared by the supervisor and the workers: the
// CAF system configuration (io middleman, heartbeats, the wire types) and parsing
// "ADDR:PORT". Connections are opened by troupe's own code, not CAF's: the
// supervisor's gate (actors/cluster/cluster_gate.h) and a worker's knock
// (actors/cluster/join_client.h) run the join handshake (and TLS, actors/cluster/tls_context.h)
// before the socket is handed to CAF (actors/cluster/basp_adopt.h).
//
// Heartbeats: both sides send a BASP heartbeat every `heartbeat`. A worker drops a
// supervisor connection silent for `connection_timeout` (CAF 0.17 keys
// middleman.heartbeat-interval / middleman.connection-timeout). The supervisor sets
// no CAF timeout: its link watch judges each worker on that worker's own link
// (actors/cluster/link_watch.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "actors/cluster/tls_context.h"

namespace troupe::actors {

struct NetOptions {
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds connection_timeout{5000};  // 0: CAF never drops a silent connection
  TlsOptions tls;
};

// Loads the middleman, sets heartbeats and the scheduler size, and registers every
// wire type.
void configure_network(caf::actor_system_config& cfg, const NetOptions& options);

// "host:port" -> (host, port); throws std::invalid_argument naming `flag` and the text.
std::pair<std::string, uint16_t> parse_address(const std::string& text, const std::string& flag);

}  // namespace troupe::actors
