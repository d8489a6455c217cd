// A whole file mapped read-only into memory.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::ckpt {

class MappedFile {
 public:
  // Throws CheckpointError naming the path when it cannot be opened or mapped.
  explicit MappedFile(std::string path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace troupe::ckpt
