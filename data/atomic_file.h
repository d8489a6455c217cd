// Durable writes: bytes go to a temporary name next to the target
// ("<path>.tmp.<pid>.<n>"), are fsynced, and are renamed onto the target only by
// commit(); the directory is fsynced after the rename. A writer destroyed without
// commit() removes its temporary file, so a failed run leaves nothing half-written.
// Two processes writing the same target race safely: each has its own temporary
// name and rename is atomic, so readers see one complete file or the other.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace troupe::data {

class AtomicFile {
 public:
  explicit AtomicFile(std::string target);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* bytes, size_t n);
  // Bytes written so far (including those still buffered).
  size_t size() const { return written_; }
  // Flush, fsync, rename onto the target, fsync the directory.
  void commit();
  const std::string& target() const { return target_; }

 private:
  void flush();
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  size_t written_ = 0;
  std::vector<char> buffer_;
  size_t buffered_ = 0;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

// fsync the directory holding `path` (makes a rename durable).
void fsync_parent_dir(const std::string& path);

}  // namespace troupe::data
