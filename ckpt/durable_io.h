// File-system primitives of the commit protocol: full writes, fsync of files and
// directories, renames, recursive removal. Every failure throws CheckpointError
// naming the path and the system error.
//
// Nothing here deletes a half-written file when an exception unwinds: a crash
// cannot run cleanup either, so the commit protocol is designed (and tested) to
// tolerate leftovers and removes them itself on the next commit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::ckpt {

// A file opened for writing from scratch (created, or truncated when it exists).
// Small writes are buffered; large ones go straight to the kernel. Keeps the
// CRC-32C of every byte written so far.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // closes the descriptor; never removes the file

  void write(const void* bytes, size_t n);
  // The same, for bytes whose CRC-32C the caller already computed.
  void write(const void* bytes, size_t n, uint32_t crc_of_bytes);
  // Writes zero bytes until size() is a multiple of `alignment`.
  void pad_to(uint64_t alignment);
  // Flushes the buffer and fsyncs the file's data and metadata.
  void sync();
  void close();
  // Bytes written so far (buffered ones included).
  uint64_t size() const { return size_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
  std::vector<char> buffer_;
};

// fsync a directory, making the creations, renames and removals inside it durable.
void fsync_dir(const std::string& dir);

// rename(2): atomic replacement of `to` when it is a file or an empty directory.
void rename_path(const std::string& from, const std::string& to);

// mkdir(2) of one directory; it must not exist yet.
void make_dir(const std::string& dir);

// Removes a file or a directory tree; nothing happens when it does not exist.
void remove_tree(const std::string& path);

// The whole content of a regular file (util::read_file, throwing CheckpointError).
std::string read_file(const std::string& path);

// util::write_file_atomically, throwing CheckpointError: a unique temporary next to
// PATH is written and fsynced, renamed onto PATH, and the parent directory is fsynced.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The directory part of a path ("." when there is none).
std::string parent_dir(const std::string& path);

}  // namespace troupe::ckpt
