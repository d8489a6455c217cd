// Fault injection on checkpoint files (Fault.CORRUPT_SHARD / TRUNCATE_SHARD):
// damage a shard after it is written, as a failing disk or a bad copy would.
// Loading must then report the damage and fall back to the previous checkpoint.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::ckpt {

// XORs `count` bytes starting at `offset` with 0xFF (every bit flips, so the
// damage is never a no-op). Throws CheckpointError naming the file when the range
// is outside it.
void flip_bytes(const std::string& path, uint64_t offset, uint64_t count = 1);

// Cuts the file to `size` bytes (smaller than its current size).
void truncate_file(const std::string& path, uint64_t size);

// The path of shard number `index` (manifest order) of the checkpoint in `dir`.
std::string shard_file_path(const std::string& dir, int index);

// Flips one byte in the middle of shard `index`'s piece data (or of the file when
// it holds no piece); returns the shard's path.
std::string corrupt_shard(const std::string& dir, int index);
// Cuts shard `index` to half its size; returns the shard's path.
std::string truncate_shard(const std::string& dir, int index);

}  // namespace troupe::ckpt
