// A worker's side of the join handshake (actors/cluster/join_protocol.h): connect to the
// supervisor's gate, run the TLS handshake when asked, say hello, check the
// supervisor's proof, prove the secret, and hand the admitted socket to CAF
// (actors/cluster/basp_adopt.h). Every read is bounded (kMaxFrameBytes) and the whole attempt
// has a deadline, so a wrong or hostile address cannot hold a worker either.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/all.hpp>
#include <openssl/ssl.h>

#include "actors/cluster/join_protocol.h"

namespace troupe::actors {

struct KnockOptions {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  JoinHello hello;               // the nonce is drawn fresh for every attempt
  std::shared_ptr<SSL_CTX> tls;  // null: plain TCP
  std::chrono::milliseconds attempt_timeout{10000};
};

struct KnockResult {
  enum class Kind {
    joined,       // admitted: `registrar`, `ticket`, `workdir` are set
    unreachable,  // no connection, or it broke before a verdict: try again
    refused,      // the supervisor refused it, or could not prove the secret: final
    unusable,     // admitted to a run this process cannot serve (its workdir is missing here)
  };
  Kind kind = Kind::unreachable;
  std::string message;  // why, for every kind but joined
  caf::actor registrar;
  std::string ticket;
  std::string workdir;
};

// One attempt.
KnockResult knock(caf::actor_system& sys, const KnockOptions& options);

}  // namespace troupe::actors
