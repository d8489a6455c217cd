// Writes one shard file: the pieces one checkpoint writer holds, as raw f32 data
// followed by the shard's piece table (layout in ckpt/format.h).
//
// The file is written under DIR/FILE.tmp and only finish() fsyncs it and renames
// it to DIR/FILE, so a shard that exists under its final name is complete. DIR is
// the checkpoint's .partial directory (CheckpointCommit::partial_dir()); the
// directory itself is fsynced by the commit, not here. Writing the same pieces in
// the same order gives a bitwise identical file.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "ckpt/commit_point.h"
#include "ckpt/durable_io.h"
#include "ckpt/piece.h"
#include "ckpt/region.h"
#include "messages/checkpoint.pb.h"

namespace troupe::ckpt {

// What a piece is: tensor name, kind, global shape and the region it holds.
struct PieceSpec {
  std::string name;
  TensorKind kind = TensorPiece::PARAM;
  Shape global_shape;
  Region region;

  // The whole global tensor in one piece.
  static PieceSpec whole(std::string name, TensorKind kind, Shape shape);
};

class ShardWriter {
 public:
  // `file` is a bare file name (no '/'); `writer` names who writes it in reports.
  ShardWriter(std::string dir, std::string file, std::string writer = "", CommitHook hook = {});
  // In memory: the shard file's bytes are appended to `*bytes` (which must outlive the
  // writer) instead of a file, bit for bit what the file would hold; finish() returns the
  // same record and touches no disk (engine/state_mirror.h).
  ShardWriter(std::string* bytes, std::string file, std::string writer = "");
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one piece; data.size() must equal spec.region.elements().
  void add(const PieceSpec& spec, std::span<const float> data);
  // Writes the table and footer, fsyncs, renames to the final name and returns the
  // record the manifest lists. Calls the hook at kShardTempWritten and kShardRenamed.
  ShardFile finish();

  const std::string& file() const { return record_.file(); }

 private:
  // Appends to the file or to memory_, whichever this writer writes.
  void emit(const void* bytes, size_t n, uint32_t crc_of_bytes);
  void emit(const void* bytes, size_t n);
  uint64_t emitted() const;
  void write_header();

  std::string dir_;
  CommitHook hook_;
  ShardFile record_;
  std::unique_ptr<OutputFile> out_;
  std::string* memory_ = nullptr;
  uint32_t memory_crc_ = 0;
  bool finished_ = false;
};

// Rejects file names that could escape the checkpoint directory or collide with
// the manifest: empty, "." or "..", containing '/', ending in ".tmp", "manifest.pb".
void check_shard_file_name(const std::string& file);

// Reads the piece table a shard file carries from its whole content `bytes`
// (size `size`), checking header, footer and table checksum. `path` names it in errors.
ShardTable read_shard_table(const char* bytes, uint64_t size, const std::string& path);

}  // namespace troupe::ckpt
