#include "util/durable_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace troupe::util {
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

std::string unique_temp_name(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  return target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

DurableFileHooks& durable_file_hooks() {
  static DurableFileHooks hooks;
  return hooks;
}

void throw_file_error(const std::string& path, const char* call, int err) {
  throw FileError(path + ": " + call + ": " + std::strerror(err));
}

void write_all(int fd, const void* bytes, size_t n, const std::string& path) {
  const auto write_fn = durable_file_hooks().write;
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = write_fn ? write_fn(fd, p, n) : ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_file_error(path, "write", errno);
    }
    if (w == 0) throw_file_error(path, "write", EIO);  // no progress: never loop forever
    p += w;
    n -= size_t(w);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_file_error(dir, "open", errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_file_error(dir, "fsync", err);
  }
  ::close(fd);
  if (const auto hook = durable_file_hooks().after_dir_fsync) hook(dir);
}

std::string parent_dir(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void fsync_parent_dir(const std::string& path) { fsync_dir(parent_dir(path)); }

// ---- AtomicFileWriter ----

AtomicFileWriter::AtomicFileWriter(std::string target, mode_t mode)
    : target_(std::move(target)), temp_(unique_temp_name(target_)) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd_ < 0) throw_file_error(temp_, "open", errno);
  buffer_.reserve(kBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* bytes, size_t n) {
  if (fd_ < 0) throw FileError(temp_ + ": write after commit");
  const char* p = static_cast<const char*>(bytes);
  written_ += n;
  if (buffer_.size() + n > kBufferBytes) {
    flush();
    if (n >= kBufferBytes) {
      write_all(fd_, p, n, temp_);
      return;
    }
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

void AtomicFileWriter::flush() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), temp_);
  buffer_.clear();
}

void AtomicFileWriter::commit() {
  if (committed_) return;
  try {
    flush();
    if (::fsync(fd_) != 0) throw_file_error(temp_, "fsync", errno);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw_file_error(temp_, "close", errno);
    if (const auto hook = durable_file_hooks().before_rename) hook(temp_, target_);
    if (std::rename(temp_.c_str(), target_.c_str()) != 0) throw_file_error(target_, "rename", errno);
  } catch (...) {
    discard();
    throw;
  }
  committed_ = true;
  fsync_parent_dir(target_);
}

void write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode) {
  AtomicFileWriter f(path, mode);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

std::string read_file(const std::string& path, const std::string& what) {
  return read_regular_file(path, what, std::numeric_limits<size_t>::max());
}

// ---- AppendFile ----

AppendFile::AppendFile(const std::string& path, Create mode, bool line_oriented) : path_(path) {
  int flags = O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC;
  if (mode == Create::kExclusive) flags |= O_EXCL;
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw_file_error(path, mode == Create::kExclusive ? "open (exclusive)" : "open for append", errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    close_fd();
    throw_file_error(path, "fstat", err);
  }
  size_ = st.st_size;
  if (line_oriented && size_ > 0) {
    // Find the last '\n'; everything after it is a line a crash left unfinished.
    char buf[4096];
    int64_t end = size_;
    int64_t keep = 0;
    while (end > 0) {
      const int64_t start = end > int64_t(sizeof buf) ? end - int64_t(sizeof buf) : 0;
      const ssize_t n = ::pread(fd_, buf, size_t(end - start), start);
      if (n != end - start) {
        const int err = n < 0 ? errno : EIO;
        close_fd();
        throw_file_error(path, "pread", err);
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
        const int err = errno;
        close_fd();
        throw_file_error(path, "ftruncate", err);
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
  if (fd_ < 0) throw FileError(path_ + ": append on a closed file");
  try {
    write_all(fd_, bytes.data(), bytes.size(), path_);
  } catch (const FileError&) {
    // Cut short (a full disk mid-record): the file goes back to where this append began,
    // so no reader sees a torn line or record, and the same bytes may be appended again.
    // Should that fail too, a line-oriented file is repaired when it is next opened.
    if (::ftruncate(fd_, off_t(size_)) != 0) {
    }
    throw;
  }
  size_ += int64_t(bytes.size());
}

void AppendFile::sync() {
  if (fd_ >= 0 && ::fdatasync(fd_) != 0) throw_file_error(path_, "fdatasync", errno);
}

void AppendFile::append_line(std::string_view line, bool durable) {
  append(line);
  if (durable) sync();
}

// ---- MappedFile ----

MappedFile MappedFile::open(const std::string& path, const std::string& what, bool sequential) {
  const int fd = open_regular_file(path, what);  // never a FIFO or a device
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_file_error(path, "fstat", err);
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = size_t(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      f.size_ = 0;
      throw_file_error(path, "mmap", err);
    }
    if (sequential) ::madvise(p, f.size_, MADV_SEQUENTIAL);
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace troupe::util
