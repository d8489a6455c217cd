// Paths where a regular file is expected: a FIFO, a directory or a device is refused
// without blocking or reading; size limits hold.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test/support/scratch_dir.h"
#include "util/input_file.h"

using namespace troupe::util;
namespace fs = std::filesystem;

namespace {

struct Scratch : troupe::testing::ScratchDir {
  Scratch() : ScratchDir("input-file") {}
};

}  // namespace

TEST_CASE("a regular file reads whole; anything else is refused naming what it is") {
  Scratch s;
  const auto file = s / "config.textproto";
  std::ofstream(file) << "model { layers: 2 }\n";
  CHECK(read_regular_file(file, "config file", 1024) == "model { layers: 2 }\n");
  CHECK_THROWS_WITH_AS(read_regular_file(file, "config file", 8),
                       (file + ": config file holds more than the 8 bytes it may").c_str(), FileError);

  const auto fifo = s / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Returns at once (nothing writes to the FIFO): refused, not waited on.
  CHECK_THROWS_WITH_AS(read_regular_file(fifo, "dataset index", 1024),
                       (fifo + ": dataset index is a FIFO, not a regular file").c_str(), FileError);
  CHECK_THROWS_WITH_AS(read_regular_file(s.path(), "config file", 1024),
                       (s.path() + ": config file is a directory, not a regular file").c_str(), FileError);
  CHECK_THROWS_WITH_AS(read_regular_file("/dev/zero", "secret file", 1024),
                       "/dev/zero: secret file is a character device, not a regular file", FileError);
  // A symbolic link is followed: to a device it is refused the same way.
  const auto link = s / "latest";
  fs::create_symlink("/dev/zero", link);
  CHECK_THROWS_WITH_AS(open_regular_file(link, "checkpoint pointer"),
                       (link + ": checkpoint pointer is a character device, not a regular file").c_str(), FileError);
  // /proc reports size 0 for files that hold more or cannot be read: read to the end.
  CHECK_THROWS_WITH_AS(read_regular_file("/proc/self/mem", "config file", 1024),
                       "/proc/self/mem: cannot read the config file: Input/output error", FileError);
  CHECK(read_regular_file("/proc/self/stat", "stat", 1 << 16).size() > 10);
  CHECK_THROWS_WITH_AS(read_regular_file(s / "missing", "config file", 1024),
                       doctest::Contains("missing: cannot open the config file: No such file or directory"), FileError);
}
