#include "ckpt/durable_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ckpt/crc32c_combine.h"
#include "ckpt/error.h"
#include "util/crc32c.h"
#include "util/durable_file.h"

namespace troupe::ckpt {
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw CheckpointError(path + ": " + what + ": " + std::strerror(err));
}

// util's error, as the CheckpointError that callers catch, with the same text.
constexpr util::FileErrorsAs<CheckpointError> translated;

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  translated([&] { util::write_all(fd, p, n, path); });
}

}  // namespace

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path_, "cannot create", errno);
  buffer_.reserve(kBufferBytes);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::flush() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), path_);
  buffer_.clear();
}

void OutputFile::write(const void* bytes, size_t n) {
  write(bytes, n, util::crc32c(bytes, n));
}

void OutputFile::write(const void* bytes, size_t n, uint32_t crc_of_bytes) {
  if (fd_ < 0) throw CheckpointError(path_ + ": write after close");
  const char* p = static_cast<const char*>(bytes);
  crc_ = crc32c_combine(crc_, crc_of_bytes, n);
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.insert(buffer_.end(), p, p + n);
  } else {
    flush();
    if (n < kBufferBytes)
      buffer_.insert(buffer_.end(), p, p + n);
    else
      write_all(fd_, p, n, path_);
  }
  size_ += n;
}

void OutputFile::pad_to(uint64_t alignment) {
  static const char zeros[64] = {};
  while (size_ % alignment != 0) {
    uint64_t n = alignment - size_ % alignment;
    write(zeros, n < sizeof zeros ? size_t(n) : sizeof zeros);
  }
}

void OutputFile::sync() {
  flush();
  if (::fsync(fd_) != 0) fail(path_, "fsync failed", errno);
}

void OutputFile::close() {
  if (fd_ < 0) return;
  flush();
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_, "close failed", errno);
}

void fsync_dir(const std::string& dir) {
  translated([&] { util::fsync_dir(dir); });
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError(from + ": cannot rename to " + to + ": " + std::strerror(errno));
}

void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) fail(dir, "cannot create directory", errno);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw CheckpointError(path + ": cannot remove: " + ec.message());
}

std::string read_file(const std::string& path) {
  // A regular file only: `latest` or a manifest that is (or links to) a FIFO or a device
  // is refused, never waited on or read without bound.
  return translated([&] { return util::read_file(path, "checkpoint file"); });
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  translated([&] { util::write_file_atomically(path, bytes); });
}

std::string parent_dir(const std::string& path) { return util::parent_dir(path); }

}  // namespace troupe::ckpt
