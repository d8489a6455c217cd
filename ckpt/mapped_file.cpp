#include "ckpt/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/input_file.h"
#include "ckpt/error.h"

namespace troupe::ckpt {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  int fd = -1;
  try {
    fd = util::open_regular_file(path_, "shard file");  // never a FIFO or a device
  } catch (const util::FileError& e) {
    throw CheckpointError(e.what());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw CheckpointError(path_ + ": cannot stat: " + std::strerror(err));
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw CheckpointError(path_ + ": cannot map: " + std::strerror(err));
    }
    ::madvise(p, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace troupe::ckpt
