#include "actors/cluster/cluster_auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "util/durable_file.h"

namespace troupe::actors {
namespace {

constexpr size_t kMinSecretBytes = 16;

std::string to_hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string load_secret(const std::string& file) {
  std::string secret, where;
  if (!file.empty()) {
    where = "secret file " + file;
    // A secret is a few dozen bytes: a device (/dev/zero) or a FIFO is refused, and so
    // is a file past 64 KiB, before anything is read.
    secret = util::read_regular_file(file, "secret file", size_t(64) << 10);
    if (!secret.empty() && secret.back() == '\n') secret.pop_back();
    if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  } else {
    where = "TROUPE_SECRET";
    const char* env = std::getenv("TROUPE_SECRET");
    if (!env)
      throw std::runtime_error(
          "no secret for this run: pass --secret-file FILE or set TROUPE_SECRET (the supervisor and every worker "
          "must use the same one)");
    secret = env;
  }
  if (secret.size() < kMinSecretBytes)
    throw std::runtime_error(fmt::format("{}: the secret has {} bytes; use at least {} (e.g. 32 random bytes as hex)",
                                         where, secret.size(), kMinSecretBytes));
  return secret;
}

std::string create_secret_file(const std::string& file) {
  const std::string secret = random_hex(32);
  const auto dir = std::filesystem::path(file).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  try {
    util::write_file_atomically(file, secret + "\n", 0600);
  } catch (const util::FileError& e) {
    throw std::runtime_error(fmt::format("secret file {}: cannot write it: {}", file, e.what()));
  }
  return secret;
}

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (RAND_bytes(buf.data(), int(buf.size())) != 1) throw std::runtime_error("OpenSSL RAND_bytes failed");
  return to_hex(buf.data(), buf.size());
}

std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
            message.size(), out, &len))
    throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  return to_hex(out, len);
}

bool same_secret_text(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace troupe::actors
