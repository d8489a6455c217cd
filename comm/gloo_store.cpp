#include "comm/gloo_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "util/durable_file.h"

namespace troupe::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// util's error as a CommError, with util's text ("PATH: CALL: system error").
template <class F>
void translated(F&& f) {
  try {
    f();
  } catch (const util::FileError& e) {
    throw CommError(fmt::format("store: {}", e.what()));
  }
}

}  // namespace

DirectoryStore::DirectoryStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw CommError(fmt::format("store: cannot use directory '{}': {}", dir_,
                                ec ? ec.message() : "not a directory"));
}

std::string DirectoryStore::path_of(const std::string& key) const {
  // Percent-encode everything but [A-Za-z0-9_-] and non-leading dots, so that any key
  // maps to one plain file name and no key can collide with a ".tmp-" temporary.
  std::string name;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0))
      name += char(c);
    else
      name += fmt::format("%{:02X}", c);
  }
  if (name.empty()) name.push_back('%');  // the empty key
  if (name.size() > 200) name = fmt::format("{}~{:016x}", name.substr(0, 150), fnv1a(key));
  return dir_ + "/" + name;
}

void DirectoryStore::set(const std::string& key, std::span<const char> value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  const std::string tmp = fmt::format("{}/.tmp-{}-{}-{}", dir_, ::getpid(),
                                      std::hash<std::thread::id>()(std::this_thread::get_id()) % 1000000,
                                      counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw CommError(fmt::format("store: creating {}: {}", tmp, std::strerror(errno)));
  try {
    translated([&] { util::write_all(fd, value.data(), value.size(), tmp); });
    if (::fsync(fd) != 0) throw CommError(fmt::format("store: fsync {}: {}", tmp, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  // link(2) publishes the complete file under its final name, or fails when the key
  // exists (rename would silently replace it).
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && err == EEXIST)
    throw CommError(fmt::format("{}: key '{}' is set already ({}): is a store prefix used twice?",
                                describe(), key, path));
  if (rc != 0) throw CommError(fmt::format("store: publishing {}: {}", path, std::strerror(err)));
  translated([&] { util::fsync_dir(dir_); });
}

void DirectoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(500);
  std::vector<std::string> missing = keys;
  for (;;) {
    std::vector<std::string> still;
    for (const auto& k : missing)
      if (::access(path_of(k).c_str(), F_OK) != 0) still.push_back(k);
    missing = std::move(still);
    if (missing.empty()) return;
    if (Clock::now() >= deadline)
      throw StoreTimeout(fmt::format("{}: timed out after {} ms waiting for key(s) {}", describe(),
                                     timeout.count(), join_keys(missing)),
                         missing);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

std::vector<char> DirectoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  const std::string path = path_of(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CommError(fmt::format("store: reading {}: {}", path, std::strerror(errno)));
  std::vector<char> out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw CommError(fmt::format("store: reading {}: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

void MemoryStore::set(const std::string& key, std::span<const char> value) {
  std::lock_guard lock(mu_);
  if (!values_.emplace(key, std::vector<char>(value.begin(), value.end())).second)
    throw CommError(fmt::format("{}: key '{}' is set already: is a store prefix used twice?",
                                describe(), key));
  cv_.notify_all();
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!values_.count(k)) out.push_back(k);
    return out;
  };
  if (cv_.wait_for(lock, timeout, [&] { return missing().empty(); })) return;
  const auto left = missing();
  throw StoreTimeout(fmt::format("{}: timed out after {} ms waiting for key(s) {}", describe(),
                                 timeout.count(), join_keys(left)),
                     left);
}

std::vector<char> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard lock(mu_);
  return values_.at(key);
}

}  // namespace troupe::comm
