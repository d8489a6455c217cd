#include "actors/cluster/tls_context.h"

#include <stdexcept>

#include <fmt/format.h>
#include <openssl/err.h>

namespace troupe::actors {

std::string tls_error_text() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text;
}

std::shared_ptr<SSL_CTX> make_tls_context(const TlsOptions& o, bool server) {
  const int given = !o.certificate.empty() + !o.key.empty() + !o.ca_file.empty();
  if (given != 0 && given != 3)
    throw std::runtime_error("--tls-cert, --tls-key and --tls-ca go together: give all three or none");
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()), SSL_CTX_free);
  if (!ctx) throw std::runtime_error("TLS: cannot create an OpenSSL context: " + tls_error_text());
  const auto fail = [](const std::string& what) { return std::runtime_error(what + ": " + tls_error_text()); };
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (given == 3) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.certificate.c_str()) != 1)
      throw fail("--tls-cert " + o.certificate + ": cannot load the certificate");
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), o.key.c_str(), SSL_FILETYPE_PEM) != 1)
      throw fail("--tls-key " + o.key + ": cannot load the private key");
    if (SSL_CTX_check_private_key(ctx.get()) != 1)
      throw fail("--tls-key " + o.key + ": it does not match --tls-cert " + o.certificate);
    if (SSL_CTX_load_verify_locations(ctx.get(), o.ca_file.c_str(), nullptr) != 1)
      throw fail("--tls-ca " + o.ca_file + ": cannot load the CA certificate");
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    if (SSL_CTX_set_cipher_list(ctx.get(), "HIGH:!aNULL:!MD5") != 1) throw fail("TLS: cannot set the cipher list");
  } else {
    // Anonymous ECDH exists only up to TLS 1.2, and only at security level 0.
    SSL_CTX_set_max_proto_version(ctx.get(), TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
    if (SSL_CTX_set1_groups_list(ctx.get(), "P-384:P-256") != 1) throw fail("TLS: cannot set the ECDH groups");
    if (SSL_CTX_set_cipher_list(ctx.get(), "AECDH-AES256-SHA@SECLEVEL=0") != 1)
      throw fail("TLS: this OpenSSL offers no anonymous ECDH cipher (AECDH-AES256-SHA); give certificates");
  }
  // No session tickets or resumption: every connection runs a full handshake.
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  // TLS 1.3 would otherwise send tickets after the handshake, bytes the join
  // handshake would have to read past.
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  return ctx;
}

std::shared_ptr<SSL> new_tls_session(SSL_CTX* ctx, int fd, bool server) {
  std::shared_ptr<SSL> ssl(SSL_new(ctx), SSL_free);
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1)
    throw std::runtime_error("TLS: cannot create a session: " + tls_error_text());
  if (server)
    SSL_set_accept_state(ssl.get());
  else
    SSL_set_connect_state(ssl.get());
  return ssl;
}

std::string tls_binding(SSL* ssl) {
  static constexpr char kLabel[] = "EXPORTER-troupe-join";
  unsigned char out[32];
  if (SSL_export_keying_material(ssl, out, sizeof out, kLabel, sizeof kLabel - 1, nullptr, 0, 0) != 1)
    throw std::runtime_error("TLS: cannot export keying material: " + tls_error_text());
  std::string hex;
  for (unsigned char b : out) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace troupe::actors
