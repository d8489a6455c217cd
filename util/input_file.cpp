#include "util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace troupe::util {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "of an unknown kind";
}

[[noreturn]] void fail(const std::string& path, const std::string& what, const std::string& why) {
  throw FileError(path + ": " + what + " " + why);
}

}  // namespace

int open_regular_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a
  // writer; it has no effect on the regular files that pass the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open the " + what + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw FileError(path + ": cannot examine the " + what + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, what, std::string("is ") + kind_of(st.st_mode) + ", not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  const int fd = open_regular_file(path, what);
  // Read to the end, not to st_size: files under /proc report size 0 and hold more (or
  // fail to read, as /proc/self/mem does at offset 0).
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw FileError(path + ": cannot read the " + what + ": " + std::strerror(e));
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      ::close(fd);
      fail(path, what, "holds more than the " + std::to_string(max_bytes) + " bytes it may");
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace troupe::util
