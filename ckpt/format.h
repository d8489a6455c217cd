// On-disk constants shared by the shard and manifest files (docs/checkpoints.md).
//
// Shard file (one per checkpoint writer), all integers little-endian:
//   [0, 64)          header: magic "TRPSHRD1", u32 format version, zeros
//   [64, T)          piece data: raw f32 values, each piece at a multiple of 64 bytes
//                    (zero padding between pieces)
//   [T, T + n)       ShardTable (messages/checkpoint.proto), protobuf binary
//   [T + n, +32)     footer: u64 T, u64 n, u32 CRC-32C of the table, u32 0, magic "TRPSHEND"
// The manifest records the file's size and the CRC-32C of all its bytes.
//
// Manifest file (manifest.pb in the checkpoint directory):
//   [0, 24)          header: magic "TRPMANI1", u64 payload size, u32 CRC-32C of payload, u32 0
//   [24, 24 + size)  CheckpointManifest, protobuf binary
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

namespace troupe::ckpt {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian and written with plain stores");

// CheckpointManifest.format_version and the shard header's version.
inline constexpr uint32_t kFormatVersion = 1;

inline constexpr std::string_view kShardMagic = "TRPSHRD1";
inline constexpr std::string_view kShardEndMagic = "TRPSHEND";
inline constexpr uint64_t kShardHeaderBytes = 64;
inline constexpr uint64_t kShardFooterBytes = 32;
inline constexpr uint64_t kPieceAlignment = 64;

inline constexpr std::string_view kManifestMagic = "TRPMANI1";
inline constexpr uint64_t kManifestHeaderBytes = 24;

// Names inside a checkpoint root and a checkpoint directory.
inline constexpr std::string_view kManifestFile = "manifest.pb";
inline constexpr std::string_view kLatestFile = "latest";

}  // namespace troupe::ckpt
