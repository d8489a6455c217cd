// Files a user names where a regular file is expected (dataset halves, corpus inputs,
// tokenizer files): opened through util/input_file.h, so a FIFO, directory, socket or
// device is refused, naming the path and what it is, before a byte is read and without
// blocking. Its util::FileError comes out as DataError with the same text.
//
// MappedFile: a read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::data {

// util::open_regular_file, throwing DataError. Returns the descriptor; the caller closes it.
int open_input_file(const std::string& path, const std::string& what);
// util::read_regular_file, throwing DataError.
std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes);

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. It is opened with util::open_regular_file, so a FIFO,
  // directory, socket or device is refused without blocking or reading it; `what`
  // names the file in errors ("dataset index"). Throws DataError naming the path when
  // it is missing, not a regular file, or cannot be mapped. An empty file maps to
  // size() == 0.
  static MappedFile open(const std::string& path, const std::string& what);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace troupe::data
