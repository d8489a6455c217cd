// util/durable_file.h, one guarantee per case: short writes and EINTR are retried, a
// crash before the rename leaves the old file and no temporary, the folder is fsynced,
// appends (with and without fdatasync), FIFOs refused, maps of empty and regular files,
// and errors naming the path and the call.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "test/support/scratch_dir.h"
#include "util/durable_file.h"

using namespace troupe::util;
namespace fs = std::filesystem;

namespace {

struct Scratch : troupe::testing::ScratchDir {
  Scratch() : ScratchDir("durable-file") {}
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Restores the default hooks when a case ends, even by a failed check.
struct HookGuard {
  ~HookGuard() { durable_file_hooks() = DurableFileHooks{}; }
};

int g_calls = 0;
int g_eintr_left = 0;
std::vector<std::string> g_fsynced_dirs;

// At most 3 bytes per call.
ssize_t short_write(int fd, const void* p, size_t n) {
  ++g_calls;
  return ::write(fd, p, n < 3 ? n : 3);
}

// EINTR on the first calls, then a full write.
ssize_t interrupted_write(int fd, const void* p, size_t n) {
  ++g_calls;
  if (g_eintr_left > 0) {
    --g_eintr_left;
    errno = EINTR;
    return -1;
  }
  return ::write(fd, p, n);
}

ssize_t failing_write(int, const void*, size_t) {
  errno = EIO;
  return -1;
}

// Writes half of what it is given, then fails as a full disk does.
ssize_t half_then_full(int fd, const void* p, size_t n) {
  ++g_calls;
  if (g_calls == 1 && n > 1) return ::write(fd, p, n / 2);
  errno = ENOSPC;
  return -1;
}

void crash_before_rename(const std::string&, const std::string&) { throw std::runtime_error("crash before rename"); }

void record_dir_fsync(const std::string& dir) { g_fsynced_dirs.push_back(dir); }

}  // namespace

TEST_CASE("a short write is continued until every byte is written") {
  HookGuard guard;
  Scratch s;
  g_calls = 0;
  durable_file_hooks().write = short_write;
  const std::string text = "eleven byte";
  write_file_atomically(s / "f", text);
  CHECK(slurp(s / "f") == text);
  CHECK(g_calls == 4);  // 3 + 3 + 3 + 2

  // The append path loops too.
  g_calls = 0;
  AppendFile a(s / "log", AppendFile::Create::kAppend, true);
  a.append("0123456789\n");
  CHECK(slurp(s / "log") == "0123456789\n");
  CHECK(g_calls == 4);
}

TEST_CASE("a write interrupted by a signal (EINTR) is retried") {
  HookGuard guard;
  Scratch s;
  g_calls = 0;
  g_eintr_left = 2;
  durable_file_hooks().write = interrupted_write;
  write_file_atomically(s / "f", "payload");
  CHECK(slurp(s / "f") == "payload");
  CHECK(g_calls == 3);
}

TEST_CASE("a crash before the rename leaves the old file intact and no temporary behind") {
  HookGuard guard;
  Scratch s;
  write_file_atomically(s / "latest", "step_00000001\n");
  durable_file_hooks().before_rename = crash_before_rename;
  CHECK_THROWS_WITH_AS(write_file_atomically(s / "latest", "step_00000002\n"), "crash before rename", std::runtime_error);
  CHECK(slurp(s / "latest") == "step_00000001\n");
  CHECK(entries(s.path()) == std::vector<std::string>{"latest"});

  // A writer given up without commit() removes its temporary; the target is untouched.
  {
    AtomicFileWriter w(s / "latest");
    w.write("partial");
    CHECK(fs::exists(w.temp_path()));
    CHECK(fs::path(w.temp_path()).parent_path() == fs::path(s.path()));
    CHECK(w.temp_path() != s / "latest");
  }
  CHECK(entries(s.path()) == std::vector<std::string>{"latest"});
  CHECK(slurp(s / "latest") == "step_00000001\n");

  // A failed write likewise.
  durable_file_hooks() = DurableFileHooks{};
  durable_file_hooks().write = failing_write;
  CHECK_THROWS_AS(write_file_atomically(s / "latest", "x"), FileError);
  CHECK(entries(s.path()) == std::vector<std::string>{"latest"});
}

TEST_CASE("temporary names are unique, so two writers of one target never share one") {
  Scratch s;
  AtomicFileWriter a(s / "t"), b(s / "t");
  CHECK(a.temp_path() != b.temp_path());
  a.write("a");
  b.write("b");
  a.commit();
  b.commit();
  CHECK(slurp(s / "t") == "b");
  CHECK(entries(s.path()) == std::vector<std::string>{"t"});
}

TEST_CASE("the folder is fsynced after the rename, and by fsync_dir") {
  HookGuard guard;
  Scratch s;
  g_fsynced_dirs.clear();
  durable_file_hooks().after_dir_fsync = record_dir_fsync;
  write_file_atomically(s / "f", "x");
  CHECK(g_fsynced_dirs == std::vector<std::string>{s.path()});
  fsync_parent_dir("relative-name");
  CHECK(g_fsynced_dirs.back() == ".");
  CHECK(parent_dir("a/b") == "a");
  CHECK(parent_dir("b") == ".");
}

TEST_CASE("the file gets the mode asked for") {
  Scratch s;
  write_file_atomically(s / "secret", "s3cret\n", 0600);
  struct stat st {};
  REQUIRE(::stat((s / "secret").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("append with and without fdatasync; an unterminated last line is cut off on open") {
  Scratch s;
  const auto path = s / "metrics.jsonl";
  {
    AppendFile f(path, AppendFile::Create::kAppend, true);
    f.append_line("{\"step\":1}\n", /*durable=*/false);
    f.append_line("{\"step\":2}\n", /*durable=*/true);
    CHECK(f.size() == 22);
  }
  CHECK(slurp(path) == "{\"step\":1}\n{\"step\":2}\n");
  { std::ofstream(path, std::ios::app) << "{\"step\":3"; }  // a crash mid-record
  AppendFile f(path, AppendFile::Create::kAppend, true);
  CHECK(f.repaired_bytes() == 9);
  CHECK(f.size() == 22);
  CHECK_THROWS_WITH_AS(AppendFile(path, AppendFile::Create::kExclusive, false),
                       (path + ": open (exclusive): File exists").c_str(), FileError);
}

TEST_CASE("read_file reads a regular file whole and refuses a FIFO without blocking") {
  Scratch s;
  write_file_atomically(s / "f", std::string(100000, 'z'));
  CHECK(read_file(s / "f") == std::string(100000, 'z'));
  const auto fifo = s / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(read_file(fifo, "manifest"), (fifo + ": manifest is a FIFO, not a regular file").c_str(), FileError);
  CHECK_THROWS_WITH_AS(MappedFile::open(fifo, "shard file"), (fifo + ": shard file is a FIFO, not a regular file").c_str(),
                       FileError);
}

TEST_CASE("MappedFile maps an empty file and a regular file; moves hand the map over") {
  Scratch s;
  write_file_atomically(s / "empty", "");
  const MappedFile e = MappedFile::open(s / "empty", "dataset index");
  CHECK(e.size() == 0);
  CHECK(e.data() == nullptr);
  write_file_atomically(s / "f", "hello");
  MappedFile m = MappedFile::open(s / "f", "shard file", /*sequential=*/true);
  REQUIRE(m.size() == 5);
  CHECK(std::string(m.chars(), m.size()) == "hello");
  CHECK(m.path() == s / "f");
  MappedFile moved = std::move(m);
  CHECK(m.size() == 0);  // NOLINT(bugprone-use-after-move): the moved-from map is empty
  CHECK(std::string(moved.chars(), moved.size()) == "hello");
}

TEST_CASE("errors name the path and the call that failed") {
  HookGuard guard;
  Scratch s;
  const auto missing = s / "no/such/dir/f";
  CHECK_THROWS_WITH_AS(write_file_atomically(missing, "x"),
                       doctest::Contains((missing + ".tmp.").c_str()), FileError);
  CHECK_THROWS_WITH_AS(write_file_atomically(missing, "x"),
                       doctest::Contains(": open: No such file or directory"), FileError);
  CHECK_THROWS_WITH_AS(fsync_dir(s / "nowhere"), (s / "nowhere" + ": open: No such file or directory").c_str(),
                       FileError);
  durable_file_hooks().write = failing_write;
  AtomicFileWriter w(s / "g");
  w.write("abc");
  CHECK_THROWS_WITH_AS(w.commit(), (w.temp_path() + ": write: Input/output error").c_str(), FileError);
  CHECK_THROWS_WITH_AS(MappedFile::open(s / "none", "shard file"),
                       (s / "none" + ": cannot open the shard file: No such file or directory").c_str(), FileError);
}

TEST_CASE("an append cut short by a full disk leaves nothing of itself: no torn line, and it can be appended again") {
  HookGuard guard;
  Scratch s;
  const auto path = s / "metrics.jsonl";
  AppendFile f(path, AppendFile::Create::kAppend, true);
  f.append("{\"type\":\"step\",\"step\":1}\n");
  const auto before = read_file(path);
  g_calls = 0;
  durable_file_hooks().write = half_then_full;
  CHECK_THROWS_WITH_AS(f.append("{\"type\":\"step\",\"step\":2}\n"),
                       (path + ": write: No space left on device").c_str(), FileError);
  CHECK(g_calls == 2);  // half of the line went in before the disk was full
  CHECK(read_file(path) == before);
  CHECK(f.size() == int64_t(before.size()));
  durable_file_hooks() = DurableFileHooks{};
  f.append("{\"type\":\"step\",\"step\":2}\n");
  CHECK(read_file(path) == before + "{\"type\":\"step\",\"step\":2}\n");
}
