// The checkpoint manifest (messages/checkpoint.proto): its file encoding, its
// consistency rules, and the config fingerprint it carries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "messages/checkpoint.pb.h"
#include "messages/config.pb.h"

namespace troupe::ckpt {

// 64-bit FNV-1a: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
uint64_t fnv1a64(std::string_view bytes);

// The config in canonical protobuf text format: a copy with every unset singular
// field of every (sub)message set to its default, printed by TextFormat. Configs
// that differ only in which defaults were spelled out print identically. model.norm_eps,
// whose unset value means layernorm_eps, is written as that epsilon (not as 0).
std::string canonical_config_text(const Config& config);

// Sets manifest.config_text (canonical) and config_hash (fnv1a64 of that text).
void set_manifest_config(CheckpointManifest& manifest, const Config& config);

// Parses manifest.config_text back into a Config; `where` names the manifest in errors.
Config manifest_config(const CheckpointManifest& manifest, const std::string& where);

// The manifest file's bytes: 24-byte header (magic, payload size, CRC-32C) + payload.
std::string encode_manifest(const CheckpointManifest& manifest);

// Decodes manifest file bytes read from `path` and checks them with check_manifest.
// Throws CheckpointError naming `path` and the damage.
CheckpointManifest decode_manifest(const std::string& bytes, const std::string& path);

// The rules of a manifest: known format_version, config_hash matches config_text,
// step and counters >= 0, topology >= 1, shard file names valid and unique, every
// piece valid and inside its shard's data region, and all pieces of one
// (name, kind) agree on the global shape.
void check_manifest(const CheckpointManifest& manifest, const std::string& path);

// The rules a manifest to resume from must keep besides check_manifest's: its counters
// describe one position (successful + skipped updates = step; consumed_samples = step x
// global batch = data_position.consumed_samples; lr_schedule_samples = successful
// updates x global batch; the batch from config_text). Throws CheckpointError naming
// `path` and the rule broken. (Resuming checks it: ckpt/reader.h.)
void check_counters(const CheckpointManifest& manifest, const std::string& path);

// Reads DIR/manifest.pb.
CheckpointManifest read_manifest(const std::string& checkpoint_dir);

}  // namespace troupe::ckpt
