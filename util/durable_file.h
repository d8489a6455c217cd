// Durable files: the one place that writes a file so that a crash never leaves a torn
// one under its final name, appends records, fsyncs folders and maps files read-only.
// What it guarantees:
//
//  * write_file_atomically / AtomicFileWriter: the bytes go to a temporary name unique
//    to this process and call, in the target's own folder ("<path>.tmp.<pid>.<n>",
//    created with O_EXCL), every write loops over short writes and EINTR, the file is
//    fsynced and closed, renamed onto the target, and the folder is fsynced. Readers
//    see the old file or the new one, never a mix. When anything fails (or a writer is
//    destroyed without commit()) the temporary is removed; a crash may leave one behind
//    under its temporary name, never under the target's.
//  * AppendFile: O_APPEND writes, each looped to completion; sync() is fdatasync, for
//    callers whose records must survive a crash of the machine, not just the process.
//  * read_file: util::read_regular_file with no size limit (regular files only).
//  * MappedFile: a read-only map of a regular file opened with open_regular_file.
//  * fsync_dir: opens the folder and fsyncs it; a failure throws.
//
// Every failure throws util::FileError, one line naming the path and the call that
// failed: "PATH: fsync: Input/output error".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/input_file.h"

namespace troupe::util {

// Throws FileError("PATH: CALL: strerror(err)").
[[noreturn]] void throw_file_error(const std::string& path, const char* call, int err);

// Runs `f`; a FileError it throws comes out as `Error` with the same text (for the
// libraries whose callers catch their own error type: CheckpointError, MetricsError...).
template <class Error, class F>
auto rethrow_file_error_as(F&& f) {
  try {
    return f();
  } catch (const FileError& e) {
    throw Error(e.what());
  }
}

// rethrow_file_error_as<Error> as a value a library names once:
//   constexpr util::FileErrorsAs<CheckpointError> translated;  ...  translated([&] { ... });
template <class Error>
struct FileErrorsAs {
  template <class F>
  auto operator()(F&& f) const {
    return rethrow_file_error_as<Error>(std::forward<F>(f));
  }
};

// Writes all `n` bytes to `fd`, retrying short writes and EINTR. `path` names the file
// in errors.
void write_all(int fd, const void* bytes, size_t n, const std::string& path);

// fsync of a folder, making creations, renames and removals inside it durable.
void fsync_dir(const std::string& dir);
// The folder part of a path ("." when there is none).
std::string parent_dir(const std::string& path);
// fsync_dir(parent_dir(path)).
void fsync_parent_dir(const std::string& path);

// A file written under a unique temporary name next to `target` and renamed onto it
// only by commit(). Small writes are buffered.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string target, mode_t mode = 0644);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();  // without commit(): closes and removes the temporary

  void write(const void* bytes, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Bytes written so far (buffered ones included).
  size_t size() const { return written_; }
  // Flush, fsync, close, rename onto the target, fsync the folder.
  void commit();
  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void flush();
  void discard() noexcept;
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  size_t written_ = 0;
  std::vector<char> buffer_;
  bool committed_ = false;
};

// The whole of `bytes` as `path`, through an AtomicFileWriter.
void write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode = 0644);

// The whole of a regular file (FIFOs, folders and devices are refused).
std::string read_file(const std::string& path, const std::string& what = "file");

class AppendFile {
 public:
  enum class Create {
    kAppend,     // keep what is there
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

  // Appends all of `bytes` (short writes and EINTR retried). Once this returns the bytes
  // are in the kernel: they survive a crash of the process, not of the machine. When it
  // throws (a full disk), the file is cut back to its size before the call: nothing of
  // `bytes` stays, so a record is in the file whole or not at all.
  void append(std::string_view bytes);
  // fdatasync: what was appended survives a crash of the machine too.
  void sync();
  // append(), then sync() when `durable`.
  void append_line(std::string_view line, bool durable);

  const std::string& path() const { return path_; }
  // Bytes in the file (after any repair, plus what this object appended).
  int64_t size() const { return size_; }
  // Bytes cut off an unterminated last line when the file was opened.
  int64_t repaired_bytes() const { return repaired_; }

 private:
  void close_fd();
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  int64_t repaired_ = 0;
};

// A read-only map of a whole regular file, opened with open_regular_file (`what` names
// it in errors). An empty file maps to size() == 0 and data() == nullptr. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile open(const std::string& path, const std::string& what, bool sequential = false);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  const char* chars() const { return reinterpret_cast<const char*>(data_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Test hooks: the write(2) the module calls, a call just before each rename of a
// temporary onto its target (a hook that throws simulates a crash there), and a call
// after each folder fsync. Defaults: ::write, none, none. Not thread-safe to change.
struct DurableFileHooks {
  ssize_t (*write)(int fd, const void* bytes, size_t n) = nullptr;  // null: ::write
  void (*before_rename)(const std::string& temp, const std::string& target) = nullptr;
  void (*after_dir_fsync)(const std::string& dir) = nullptr;
};
DurableFileHooks& durable_file_hooks();

}  // namespace troupe::util
