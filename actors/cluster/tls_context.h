// TLS for cluster mode, in troupe's own code over OpenSSL (libssl): the supervisor's
// gate and the worker run the TLS handshake themselves, under the join deadline and
// outside CAF's I/O loop, then hand the established session to CAF (actors/cluster/basp_adopt.h).
//
// With a certificate, key and CA file each side presents a certificate signed by that
// CA and requires one from its peer (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT):
// a peer without one fails the TLS handshake. Without them both sides use anonymous
// ECDH (TLS 1.2, AECDH-AES256-SHA): encrypted, not authenticated; the join handshake's
// HMACs (actors/cluster/join_protocol.h) are then bound to the session's keying material, so
// an answer relayed from another TLS session does not verify.
#pragma once

#include <memory>
#include <string>

#include <openssl/ssl.h>

namespace troupe::actors {

struct TlsOptions {
  bool enabled = false;
  std::string certificate;  // PEM certificate chain of this side ("" : anonymous)
  std::string key;          // its PEM private key
  std::string ca_file;      // PEM CA that signed the peer's certificate
};

// Throws std::runtime_error naming the file OpenSSL refused (and why), or that only
// some of certificate, key and CA were given.
std::shared_ptr<SSL_CTX> make_tls_context(const TlsOptions& options, bool server);

// A session on connected socket `fd` (not owned), not yet handshaken.
std::shared_ptr<SSL> new_tls_session(SSL_CTX* ctx, int fd, bool server);

// RFC 5705 keying material of an established session (32 bytes, hex).
std::string tls_binding(SSL* ssl);

// OpenSSL's error queue as text (drained), "" when empty.
std::string tls_error_text();

}  // namespace troupe::actors
