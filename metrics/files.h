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

// util::AppendFile (looped O_APPEND writes; with `line_oriented`, an unterminated last
// line left by a crash is cut off on open; sync() is fdatasync), throwing MetricsError.
// A resumed run opens its files with Create::kAppend; an event file is created with
// Create::kExclusive.
class AppendFile : public util::AppendFile {
 public:
  AppendFile(const std::string& path, Create mode, bool line_oriented);
  void append(std::string_view bytes);
  void sync();
};

}  // namespace troupe::metrics
