#include "data/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "data/error.h"
#include "util/input_file.h"

namespace troupe::data {

int open_input_file(const std::string& path, const std::string& what) {
  try {
    return util::open_regular_file(path, what);
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
}

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  try {
    return util::read_regular_file(path, what, max_bytes);
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
}

MappedFile MappedFile::open(const std::string& path, const std::string& what) {
  const int fd = open_input_file(path, what);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(path + ": " + what + " cannot be examined: " + std::strerror(err));
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = size_t(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw DataError(path + ": " + what + " cannot be mapped: " + std::strerror(err));
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace troupe::data
