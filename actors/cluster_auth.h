// Proving that a worker belongs to a run, and the supervisor to the worker: both
// hold the run's secret (a file, or the TROUPE_SECRET environment variable) and
// answer each other's fresh nonce with HMAC-SHA256 under it (OpenSSL libcrypto). The
// secret never travels; a nonce is used once, so a recorded answer cannot be replayed.
//
//   worker -> supervisor  hello: worker nonce Nw
//   supervisor -> worker  challenge: session S, nonce Ns, working directory D,
//                                    HMAC(secret, "troupe supervisor" S Ns Nw D)
//   worker -> supervisor  proof:     HMAC(secret, "troupe worker" S Ns Nw)
//   the worker hosts nothing until it has checked the supervisor's HMAC
//
// This proves knowledge of the secret, not the identity of the connection: a relay
// between a worker and the supervisor could pass both answers along. Certificates
// (TLS with a CA, actors/cluster_net.h) close that gap where the network is hostile.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::actors {

// The run's secret: the whole content of `file` (one trailing newline dropped), or
// TROUPE_SECRET when `file` is empty. Throws std::runtime_error naming the file or
// variable when it is missing, unreadable or shorter than 16 bytes.
std::string load_secret(const std::string& file);

// Writes a fresh random secret (32 bytes, hex) to `file` with mode 0600 (temporary
// name, fsync, rename) and returns it.
std::string create_secret_file(const std::string& file);

// `bytes` cryptographically random bytes as lowercase hex.
std::string random_hex(size_t bytes);

// HMAC-SHA256(key, message) as lowercase hex.
std::string hmac_sha256_hex(const std::string& key, const std::string& message);

// Equality in time independent of where the strings differ.
bool same_secret_text(const std::string& a, const std::string& b);

// The two messages the proofs are computed over.
// The supervisor's also covers the working directory it tells the worker to use.
std::string supervisor_proof_text(uint64_t session, const std::string& supervisor_nonce,
                                  const std::string& worker_nonce, const std::string& workdir);
std::string worker_proof_text(uint64_t session, const std::string& supervisor_nonce, const std::string& worker_nonce);

}  // namespace troupe::actors
