// Paths a user names (a config, a dataset half, a manifest, a shard, `latest`'s target, a
// secret file) where a regular file is expected: opened without blocking and checked to
// be one before a byte is read, so a FIFO never blocks a start and a device (/dev/zero,
// /proc/self/mem) is never read without bound. Errors are util::FileError, one line
// naming the path, what it was meant to be and what it is.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace troupe::util {

struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Opens `path` read-only (close-on-exec). It must be a regular file: a directory, FIFO,
// socket or device is refused without blocking. `what` names it in errors ("config
// file", "dataset index"). Returns the descriptor; the caller closes it.
int open_regular_file(const std::string& path, const std::string& what);

// The whole of a regular file of at most `max_bytes` bytes (more is refused, naming the
// size and the limit).
std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes);

}  // namespace troupe::util
