#include "ckpt/shard_writer.h"

#include <cstring>

#include "ckpt/crc32c_combine.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "util/crc32c.h"

namespace troupe::ckpt {
namespace {

void put_u32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

PieceSpec PieceSpec::whole(std::string name, TensorKind kind, Shape shape) {
  Region r = Region::whole(shape);
  return PieceSpec{std::move(name), kind, std::move(shape), std::move(r)};
}

void check_shard_file_name(const std::string& file) {
  auto ends_with = [&](std::string_view s) {
    return file.size() >= s.size() && file.compare(file.size() - s.size(), s.size(), s) == 0;
  };
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\0') != std::string::npos || ends_with(".tmp") || file == kManifestFile)
    throw CheckpointError("shard file name '" + file +
                          "' is not allowed (bare name, no '/', not ending in .tmp, not " +
                          std::string(kManifestFile) + ")");
}

ShardWriter::ShardWriter(std::string dir, std::string file, std::string writer, CommitHook hook)
    : dir_(std::move(dir)), hook_(std::move(hook)) {
  check_shard_file_name(file);
  record_.set_file(file);
  if (!writer.empty()) record_.set_writer(writer);
  out_ = std::make_unique<OutputFile>(dir_ + "/" + file + ".tmp");
  write_header();
}

ShardWriter::ShardWriter(std::string* bytes, std::string file, std::string writer)
    : dir_("(memory)"), memory_(bytes) {
  check_shard_file_name(file);
  record_.set_file(file);
  if (!writer.empty()) record_.set_writer(writer);
  memory_->clear();
  write_header();
}

void ShardWriter::write_header() {
  char header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic.data(), kShardMagic.size());
  put_u32(header + 8, kFormatVersion);
  emit(header, sizeof header);
}

void ShardWriter::emit(const void* bytes, size_t n, uint32_t crc_of_bytes) {
  if (out_) return out_->write(bytes, n, crc_of_bytes);
  memory_crc_ = crc32c_combine(memory_crc_, crc_of_bytes, n);
  memory_->append(static_cast<const char*>(bytes), n);
}

void ShardWriter::emit(const void* bytes, size_t n) { emit(bytes, n, util::crc32c(bytes, n)); }

uint64_t ShardWriter::emitted() const { return out_ ? out_->size() : memory_->size(); }

void ShardWriter::add(const PieceSpec& spec, std::span<const float> data) {
  if (finished_) throw CheckpointError(dir_ + "/" + file() + ": add() after finish()");
  const std::string what = dir_ + "/" + file() + ": piece " + tensor_label(spec.name, spec.kind);
  if (spec.name.empty()) throw CheckpointError(dir_ + "/" + file() + ": piece without a name");
  check_region(spec.global_shape, spec.region, what);
  if (int64_t(data.size()) != spec.region.elements())
    throw CheckpointError(what + ": " + std::to_string(data.size()) +
                          " values given for a region of " +
                          std::to_string(spec.region.elements()) + " elements");
  static const char zeros[kPieceAlignment] = {};
  if (const uint64_t over = emitted() % kPieceAlignment) emit(zeros, size_t(kPieceAlignment - over));
  TensorPiece* piece = record_.add_piece();
  set_piece_geometry(*piece, spec.name, spec.kind, spec.global_shape, spec.region);
  piece->set_byte_offset(emitted());
  // One pass over the data: the piece's CRC also extends the file's.
  const uint32_t crc = util::crc32c(data.data(), data.size_bytes());
  piece->set_crc32c(crc);
  emit(data.data(), data.size_bytes(), crc);
}

ShardFile ShardWriter::finish() {
  if (finished_) throw CheckpointError(dir_ + "/" + file() + ": finish() called twice");
  finished_ = true;
  ShardTable table;
  *table.mutable_piece() = record_.piece();
  const std::string bytes = table.SerializeAsString();
  const uint64_t table_offset = emitted();
  emit(bytes.data(), bytes.size());
  char footer[kShardFooterBytes] = {};
  put_u64(footer, table_offset);
  put_u64(footer + 8, bytes.size());
  put_u32(footer + 16, util::crc32c(bytes.data(), bytes.size()));
  std::memcpy(footer + 24, kShardEndMagic.data(), kShardEndMagic.size());
  emit(footer, sizeof footer);
  if (memory_) {
    record_.set_size_bytes(memory_->size());
    record_.set_crc32c(memory_crc_);
    return record_;
  }
  out_->sync();
  out_->close();
  record_.set_size_bytes(out_->size());
  record_.set_crc32c(out_->crc32c());
  const std::string temp = out_->path();
  out_.reset();
  if (hook_) hook_(CommitPoint::kShardTempWritten);
  rename_path(temp, dir_ + "/" + file());
  if (hook_) hook_(CommitPoint::kShardRenamed);
  return record_;
}

ShardTable read_shard_table(const char* bytes, uint64_t size, const std::string& path) {
  if (size < kShardHeaderBytes + kShardFooterBytes)
    throw CheckpointError(path + ": " + std::to_string(size) +
                          " bytes, too short for a shard file (header and footer take " +
                          std::to_string(kShardHeaderBytes + kShardFooterBytes) + ")");
  if (std::memcmp(bytes, kShardMagic.data(), kShardMagic.size()) != 0)
    throw CheckpointError(path + ": not a troupe shard file (bad header magic)");
  if (uint32_t v = get_u32(bytes + 8); v != kFormatVersion)
    throw CheckpointError(path + ": shard format version " + std::to_string(v) +
                          " not supported (this build reads " + std::to_string(kFormatVersion) +
                          ")");
  const char* footer = bytes + size - kShardFooterBytes;
  if (std::memcmp(footer + 24, kShardEndMagic.data(), kShardEndMagic.size()) != 0)
    throw CheckpointError(path + ": bad footer magic (file truncated or overwritten at its end)");
  const uint64_t offset = get_u64(footer), n = get_u64(footer + 8);
  const uint64_t table_end = size - kShardFooterBytes;
  if (offset < kShardHeaderBytes || offset > table_end || n != table_end - offset)
    throw CheckpointError(path + ": footer places the piece table at [" + std::to_string(offset) +
                          ", +" + std::to_string(n) + "), inconsistent with file size " +
                          std::to_string(size));
  if (uint32_t crc = util::crc32c(bytes + offset, n); crc != get_u32(footer + 16))
    throw CheckpointError(path + ": piece table CRC-32C mismatch");
  ShardTable table;
  if (!table.ParseFromArray(bytes + offset, int(n)))
    throw CheckpointError(path + ": piece table does not parse");
  for (int i = 0; i < table.piece_size(); ++i)
    check_piece(table.piece(i), kShardHeaderBytes, offset,
                path + ": piece " + std::to_string(i));
  return table;
}

}  // namespace troupe::ckpt
