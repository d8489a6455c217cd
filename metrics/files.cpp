#include "metrics/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "metrics/error.h"

namespace troupe::metrics {
namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw MetricsError(path + ": " + what + ": " + std::strerror(err));
}

void write_all(int fd, const std::string& path, std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "write failed", errno);
    }
    p += n;
    left -= size_t(n);
  }
}

void fsync_dir_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir.string(), "cannot open directory to fsync", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) fail(dir.string(), "fsync of directory failed", err);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  try {
    write_all(fd, tmp, bytes);
    if (::fsync(fd) != 0) fail(tmp, "fsync failed", errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename the temporary file onto it", err);
  }
  fsync_dir_of(path);
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open", errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail(path, "read failed", err);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

AppendFile::AppendFile(const std::string& path, Create mode, bool line_oriented) : path_(path) {
  int flags = O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC;
  if (mode == Create::kExclusive) flags |= O_EXCL;
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) fail(path, mode == Create::kExclusive ? "cannot create (exclusive)" : "cannot open for append", errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    close_fd();
    fail(path, "fstat failed", err);
  }
  size_ = st.st_size;
  if (line_oriented && size_ > 0) {
    // Find the last '\n'; everything after it is a line a crash left unfinished.
    char buf[4096];
    int64_t end = size_;
    int64_t keep = 0;
    while (end > 0) {
      int64_t start = end > int64_t(sizeof buf) ? end - int64_t(sizeof buf) : 0;
      ssize_t n = ::pread(fd_, buf, size_t(end - start), start);
      if (n != end - start) {
        int err = n < 0 ? errno : EIO;
        close_fd();
        fail(path, "cannot read the tail", err);
      }
      bool found = false;
      for (int64_t i = n - 1; i >= 0; --i) {
        if (buf[i] == '\n') {
          keep = start + i + 1;
          found = true;
          break;
        }
      }
      if (found) break;
      end = start;
    }
    if (keep < size_) {
      if (::ftruncate(fd_, keep) != 0) {
        int err = errno;
        close_fd();
        fail(path, "cannot cut the unterminated last line", err);
      }
      repaired_ = size_ - keep;
      size_ = keep;
    }
  }
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_),
      repaired_(other.repaired_) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    repaired_ = other.repaired_;
  }
  return *this;
}

AppendFile::~AppendFile() { close_fd(); }

void AppendFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void AppendFile::append(std::string_view bytes) {
  if (fd_ < 0) throw MetricsError(path_ + ": append on a closed file");
  write_all(fd_, path_, bytes);
  size_ += int64_t(bytes.size());
}

void AppendFile::sync() {
  if (fd_ >= 0 && ::fdatasync(fd_) != 0) fail(path_, "fdatasync failed", errno);
}

}  // namespace troupe::metrics
