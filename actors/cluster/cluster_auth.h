// The run's secret and the primitives the join handshake proves it with
// (actors/cluster/join_protocol.h): both sides hold the secret (a file, or the TROUPE_SECRET
// environment variable) and answer each other's fresh nonce with HMAC-SHA256 under it
// (OpenSSL libcrypto). The secret never travels; a nonce is used once, so a recorded
// answer cannot be replayed.
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

}  // namespace troupe::actors
