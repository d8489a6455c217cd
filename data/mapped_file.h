// A read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. Throws DataError naming the path when it is missing,
  // not a regular file, or cannot be mapped. An empty file maps to size() == 0.
  static MappedFile open(const std::string& path);

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
