#include "data/parquet_input.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/error.h"

extern char** environ;

namespace troupe::data {
namespace {

// The child's program: frames of the column's values on stdout (see the header).
constexpr const char* kReader = R"PY(
import struct, sys
out = sys.stdout.buffer
def fail(message):
    out.write(struct.pack("<Q", 0xFFFFFFFFFFFFFFFF))
    data = message.encode("utf-8", "replace")
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()
    sys.exit(0)
try:
    import pyarrow.parquet as pq
    import pyarrow.types as pt
except ImportError as e:
    fail("pyarrow is not importable by %s (%s): install it (pip install pyarrow) in that Python, or name "
         "another with TROUPE_PYTHON" % (sys.executable, e))
path, column = sys.argv[1], sys.argv[2]
try:
    f = pq.ParquetFile(path)
except Exception as e:
    fail("not a readable Parquet file: %s" % e)
names = f.schema_arrow.names
if column not in names:
    fail("no column %r (its columns: %s); name the text column with --parquet-column" % (column, ", ".join(names)))
kind = f.schema_arrow.field(column).type
if not (pt.is_string(kind) or pt.is_large_string(kind)):
    fail("column %r holds %s, not strings" % (column, kind))
try:
    for batch in f.iter_batches(columns=[column], batch_size=4096):
        for v in batch.column(0).to_pylist():
            data = b"" if v is None else v.encode("utf-8", "surrogatepass")
            out.write(struct.pack("<Q", len(data)))
            out.write(data)
except Exception as e:
    fail("reading column %r: %s" % (column, e))
out.flush()
)PY";

constexpr uint64_t kErrorFrame = ~uint64_t(0);

// The running child and the read end of its stdout; killed and reaped on destruction.
class Child {
 public:
  Child(const std::string& python, const std::string& path, const std::string& column) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw DataError(path + ": pipe: " + std::strerror(errno));
    read_fd_ = fds[0];
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<std::string> args = {python, "-c", kReader, path, column};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawnp(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(read_fd_);
      read_fd_ = -1;
      pid_ = -1;
      throw DataError(path + ": a Parquet file is read by pyarrow in a Python child, but " + python +
                      " could not be started: " + std::strerror(rc) + " (name the interpreter with TROUPE_PYTHON)");
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);  // stopped early: before its pipe closes under it
    if (read_fd_ >= 0) ::close(read_fd_);
    if (pid_ > 0) wait();
  }

  // Reads exactly n bytes; false at a clean end of stream before the first byte.
  bool read_exact(void* into, size_t n, const std::string& path) {
    auto* p = static_cast<char*>(into);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(read_fd_, p + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw DataError(path + ": reading from the Parquet reader: " + std::strerror(errno));
      if (r == 0) {
        if (got == 0) return false;
        throw DataError(path + ": the Parquet reader stopped in the middle of a value");
      }
      got += size_t(r);
    }
    return true;
  }

  // Reaps the child; its exit status (-1 when it did not exit normally).
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
};

}  // namespace

void read_parquet_documents(const std::string& path, const std::string& column,
                            const std::function<void(std::string_view)>& emit) {
  const char* env = std::getenv("TROUPE_PYTHON");
  const std::string python = env && *env ? env : "python3";
  Child child(python, path, column);
  std::string value;
  for (;;) {
    uint64_t size = 0;
    if (!child.read_exact(&size, sizeof size, path)) break;
    if (size == kErrorFrame) {
      uint64_t n = 0;
      child.read_exact(&n, sizeof n, path);
      std::string message(size_t(std::min<uint64_t>(n, 1 << 20)), '\0');
      child.read_exact(message.data(), message.size(), path);
      throw DataError(path + ": " + message);
    }
    if (size > (uint64_t(1) << 40)) throw DataError(path + ": the Parquet reader sent a value of " +
                                                    std::to_string(size) + " bytes");
    value.resize(size_t(size));
    child.read_exact(value.data(), value.size(), path);
    emit(value);
  }
  if (const int status = child.wait(); status != 0)
    throw DataError(path + ": the Parquet reader (" + python + ") exited with status " + std::to_string(status) +
                    (status == 127 ? " (not found?)" : "") + " before the end of the file");
}

}  // namespace troupe::data
