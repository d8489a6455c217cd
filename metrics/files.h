// File primitives of the metrics sinks, over util/durable_file.h (whose guarantees
// they are): a durable whole-file write and an append-only file written one complete
// record at a time, so that a crash loses at most the record being written. Failures
// throw MetricsError with util's text ("PATH: CALL: system error").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/durable_file.h"

namespace troupe::metrics {

// util::write_file_atomically: a unique temporary "<path>.tmp.<pid>.<n>", fsynced,
// renamed onto `path`, the directory fsynced. Readers see the old file or the new one.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole regular file; throws MetricsError naming the path when it cannot.
std::string read_file(const std::string& path);

class AppendFile {
 public:
  enum class Create {
    kAppend,     // keep what is there (a resumed run continues its files)
    kExclusive,  // fail if the file exists
  };

  // Opens `path` for appending, creating it (mode 0644) when missing. With
  // `line_oriented`, an unterminated last line left by a crash is cut off first, so
  // that every line in the file stays complete.
  AppendFile(const std::string& path, Create mode, bool line_oriented);
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  ~AppendFile();

  // Appends `bytes` with O_APPEND writes, retrying short writes. Once this returns
  // the bytes are in the kernel: they survive a crash of the process (not of the
  // machine: that needs sync()).
  void append(std::string_view bytes);
  // fdatasync: the bytes survive a crash of the machine too.
  void sync();

  const std::string& path() const { return file_.path(); }
  // Bytes in the file (after any repair, plus what this object appended).
  int64_t size() const { return file_.size(); }
  // Bytes cut off an unterminated last line when the file was opened.
  int64_t repaired_bytes() const { return file_.repaired_bytes(); }

 private:
  util::AppendFile file_;
};

}  // namespace troupe::metrics
