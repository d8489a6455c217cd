#include "data/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/error.h"

namespace troupe::data {
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

std::string unique_temp_name(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  return target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

AtomicFile::AtomicFile(std::string target)
    : target_(std::move(target)), temp_(unique_temp_name(target_)), buffer_(kBufferBytes) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw DataError(temp_ + ": cannot create (writing " + target_ + "): " + std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* bytes, size_t n) {
  const char* p = static_cast<const char*>(bytes);
  written_ += n;
  if (buffered_ + n > buffer_.size()) {
    flush();
    if (n >= buffer_.size()) {
      while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          throw DataError(temp_ + ": write failed: " + std::strerror(errno));
        }
        p += w;
        n -= size_t(w);
      }
      return;
    }
  }
  std::memcpy(buffer_.data() + buffered_, p, n);
  buffered_ += n;
}

void AtomicFile::flush() {
  size_t off = 0;
  while (off < buffered_) {
    const ssize_t w = ::write(fd_, buffer_.data() + off, buffered_ - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw DataError(temp_ + ": write failed: " + std::strerror(errno));
    }
    off += size_t(w);
  }
  buffered_ = 0;
}

void AtomicFile::commit() {
  flush();
  if (::fsync(fd_) != 0) throw DataError(temp_ + ": fsync failed: " + std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw DataError(temp_ + ": close failed: " + std::strerror(errno));
  }
  fd_ = -1;
  if (std::rename(temp_.c_str(), target_.c_str()) != 0) {
    throw DataError(target_ + ": cannot rename " + temp_ + " onto it: " + std::strerror(errno));
  }
  committed_ = true;
  fsync_parent_dir(target_);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void fsync_parent_dir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself already happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace troupe::data
