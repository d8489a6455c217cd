#include "ckpt/corrupt.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "ckpt/piece.h"

namespace troupe::ckpt {
namespace {

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw CheckpointError(path + ": cannot stat: " + std::strerror(errno));
  return uint64_t(st.st_size);
}

}  // namespace

void flip_bytes(const std::string& path, uint64_t offset, uint64_t count) {
  const uint64_t size = file_size(path);
  if (count == 0 || offset >= size || count > size - offset)
    throw CheckpointError(path + ": cannot flip bytes [" + std::to_string(offset) + ", " +
                          std::to_string(offset + count) + ") of a " + std::to_string(size) +
                          "-byte file");
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(path + ": cannot open: " + std::strerror(errno));
  std::vector<unsigned char> buf(count);
  bool ok = ::pread(fd, buf.data(), count, off_t(offset)) == ssize_t(count);
  for (auto& b : buf) b ^= 0xFF;
  ok = ok && ::pwrite(fd, buf.data(), count, off_t(offset)) == ssize_t(count);
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) throw CheckpointError(path + ": cannot flip bytes: " + std::strerror(err));
}

void truncate_file(const std::string& path, uint64_t size) {
  const uint64_t before = file_size(path);
  if (size >= before)
    throw CheckpointError(path + ": cannot truncate a " + std::to_string(before) +
                          "-byte file to " + std::to_string(size) + " bytes");
  if (::truncate(path.c_str(), off_t(size)) != 0)
    throw CheckpointError(path + ": cannot truncate: " + std::strerror(errno));
}

std::string shard_file_path(const std::string& dir, int index) {
  const CheckpointManifest m = read_manifest(dir);
  if (index < 0 || index >= m.shard_size())
    throw CheckpointError(dir + ": no shard " + std::to_string(index) + " (the manifest lists " +
                          std::to_string(m.shard_size()) + ")");
  return dir + "/" + m.shard(index).file();
}

std::string corrupt_shard(const std::string& dir, int index) {
  const CheckpointManifest m = read_manifest(dir);
  const std::string path = shard_file_path(dir, index);
  const ShardFile& shard = m.shard(index);
  uint64_t offset = file_size(path) / 2;
  if (shard.piece_size() > 0) {
    const TensorPiece& p = shard.piece(shard.piece_size() / 2);
    offset = p.byte_offset() + piece_bytes(p) / 2;
  }
  flip_bytes(path, offset, 1);
  return path;
}

std::string truncate_shard(const std::string& dir, int index) {
  const std::string path = shard_file_path(dir, index);
  truncate_file(path, file_size(path) / 2);
  return path;
}

}  // namespace troupe::ckpt
