// Durable writes of the data pipeline, over util/durable_file.h (whose guarantees
// these are): bytes go to a unique temporary name next to the target
// ("<path>.tmp.<pid>.<n>"), short writes and EINTR retried, are fsynced, and are
// renamed onto the target only by commit(); the directory is fsynced after the rename.
// A writer destroyed without commit() removes its temporary file, so a failed run
// leaves nothing half-written. Two processes writing the same target race safely: each
// has its own temporary name and rename is atomic, so readers see one complete file or
// the other. Failures throw DataError with util's text ("PATH: CALL: system error").
#pragma once

#include <cstddef>
#include <string>

#include "util/durable_file.h"

namespace troupe::data {

class AtomicFile {
 public:
  explicit AtomicFile(std::string target);

  void write(const void* bytes, size_t n);
  // Bytes written so far (including those still buffered).
  size_t size() const { return file_.size(); }
  // Flush, fsync, rename onto the target, fsync the directory.
  void commit();
  const std::string& target() const { return file_.target(); }

 private:
  util::AtomicFileWriter file_;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace troupe::data
