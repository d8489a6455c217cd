#include "ckpt/manifest.h"

#include <fmt/format.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/text_format.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/piece.h"
#include "ckpt/shard_writer.h"
#include "util/crc32c.h"

namespace troupe::ckpt {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Sets every unset singular field to its default, recursing into sub-messages
// (which are created). Repeated fields keep their elements, which are filled too.
void fill_defaults(Message& m) {
  const auto* desc = m.GetDescriptor();
  const auto* refl = m.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const FieldDescriptor* f = desc->field(i);
    if (f->is_repeated()) {
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
        for (int j = 0; j < refl->FieldSize(m, f); ++j)
          fill_defaults(*refl->MutableRepeatedMessage(&m, f, j));
      continue;
    }
    if (f->containing_oneof() && !refl->HasField(m, f)) continue;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE: fill_defaults(*refl->MutableMessage(&m, f)); break;
      case FieldDescriptor::CPPTYPE_INT32:
        if (!refl->HasField(m, f)) refl->SetInt32(&m, f, f->default_value_int32());
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        if (!refl->HasField(m, f)) refl->SetInt64(&m, f, f->default_value_int64());
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        if (!refl->HasField(m, f)) refl->SetUInt32(&m, f, f->default_value_uint32());
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        if (!refl->HasField(m, f)) refl->SetUInt64(&m, f, f->default_value_uint64());
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        if (!refl->HasField(m, f)) refl->SetDouble(&m, f, f->default_value_double());
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        if (!refl->HasField(m, f)) refl->SetFloat(&m, f, f->default_value_float());
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        if (!refl->HasField(m, f)) refl->SetBool(&m, f, f->default_value_bool());
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        if (!refl->HasField(m, f)) refl->SetEnum(&m, f, f->default_value_enum());
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        if (!refl->HasField(m, f)) refl->SetString(&m, f, f->default_value_string());
        break;
    }
  }
}

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

void put_u32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string canonical_config_text(const Config& config) {
  Config full = config;
  // model.norm_eps has no default of its own (unset means layernorm_eps): spelled out
  // with the value the run used, so a reader never takes the filled-in 0 for it.
  if (!full.model().has_norm_eps()) full.mutable_model()->set_norm_eps(full.model().layernorm_eps());
  fill_defaults(full);
  std::string text;
  google::protobuf::TextFormat::PrintToString(full, &text);
  return text;
}

void set_manifest_config(CheckpointManifest& manifest, const Config& config) {
  manifest.set_config_text(canonical_config_text(config));
  manifest.set_config_hash(fnv1a64(manifest.config_text()));
}

Config manifest_config(const CheckpointManifest& manifest, const std::string& where) {
  Config config;
  if (!google::protobuf::TextFormat::ParseFromString(manifest.config_text(), &config))
    throw CheckpointError(where + ": config_text does not parse as a troupe.Config");
  return config;
}

std::string encode_manifest(const CheckpointManifest& manifest) {
  const std::string payload = manifest.SerializeAsString();
  std::string out(kManifestHeaderBytes, '\0');
  std::memcpy(out.data(), kManifestMagic.data(), kManifestMagic.size());
  put_u64(out.data() + 8, payload.size());
  put_u32(out.data() + 16, util::crc32c(payload.data(), payload.size()));
  return out + payload;
}

CheckpointManifest decode_manifest(const std::string& bytes, const std::string& path) {
  if (bytes.size() < kManifestHeaderBytes ||
      std::memcmp(bytes.data(), kManifestMagic.data(), kManifestMagic.size()) != 0)
    throw CheckpointError(path + ": not a troupe checkpoint manifest (" +
                          std::to_string(bytes.size()) + " bytes, bad header)");
  uint64_t size;
  uint32_t crc;
  std::memcpy(&size, bytes.data() + 8, 8);
  std::memcpy(&crc, bytes.data() + 16, 4);
  if (size != bytes.size() - kManifestHeaderBytes)
    throw CheckpointError(path + ": header says " + std::to_string(size) +
                          " payload bytes, file has " +
                          std::to_string(bytes.size() - kManifestHeaderBytes));
  const char* payload = bytes.data() + kManifestHeaderBytes;
  if (uint32_t actual = util::crc32c(payload, size); actual != crc) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "CRC-32C 0x%08x, header says 0x%08x", actual, crc);
    throw CheckpointError(path + ": " + buf);
  }
  CheckpointManifest manifest;
  if (size > uint64_t(INT32_MAX) || !manifest.ParseFromArray(payload, int(size)))
    throw CheckpointError(path + ": payload does not parse as a CheckpointManifest");
  check_manifest(manifest, path);
  return manifest;
}

// The counters describe one position: every update, successful or skipped, read one
// global batch; the LR schedule moved only on successful ones. A manifest whose
// checksum holds but whose counters disagree would resume with the wrong Adam bias
// correction or data position, so it is refused with the rule it breaks.
void check_counters(const CheckpointManifest& m, const std::string& path) {
  auto refuse = [&](const std::string& rule) { throw CheckpointError(path + ": inconsistent counters: " + rule); };
  if (m.successful_updates() + m.skipped_updates() != m.step())
    refuse(fmt::format("successful_updates {} + skipped_updates {} must equal step {}", m.successful_updates(),
                       m.skipped_updates(), m.step()));
  const int64_t batch = manifest_config(m, path).batch().global_batch_size();
  if (batch <= 0) refuse(fmt::format("the config's batch.global_batch_size is {}", batch));
  // Compared as quotients, so that no product of a corrupt counter overflows.
  auto check_multiple = [&](const char* field, int64_t value, const char* of, int64_t count) {
    if (value % batch != 0 || value / batch != count)
      refuse(fmt::format("{} {} must be {} {} x global_batch_size {} = {}", field, value, of, count, batch,
                         static_cast<__int128>(count) * batch > INT64_MAX ? std::string("(too large)")
                                                                           : std::to_string(count * batch)));
  };
  check_multiple("consumed_samples", m.consumed_samples(), "step", m.step());
  check_multiple("lr_schedule_samples", m.lr_schedule_samples(), "successful_updates", m.successful_updates());
  if (m.data_position().consumed_samples() != m.consumed_samples())
    refuse(fmt::format("data_position.consumed_samples {} must equal consumed_samples {}",
                       m.data_position().consumed_samples(), m.consumed_samples()));
  // A blend's datasets share out every consumed sample.
  if (m.data_position().datasets_size() > 0) {
    int64_t sum = 0;
    for (const auto& d : m.data_position().datasets()) {
      if (d.consumed_samples() < 0 || d.consumed_tokens() < 0)
        refuse(fmt::format("data_position.datasets \"{}\": negative counts ({} samples, {} tokens)", d.prefix(),
                           d.consumed_samples(), d.consumed_tokens()));
      sum += d.consumed_samples();
    }
    if (sum != m.consumed_samples())
      refuse(fmt::format("data_position.datasets hold {} samples in all, not consumed_samples {}", sum,
                         m.consumed_samples()));
  }
}

void check_manifest(const CheckpointManifest& m, const std::string& path) {
  if (m.format_version() != kFormatVersion)
    throw CheckpointError(path + ": format_version " + std::to_string(m.format_version()) +
                          " not supported (this build reads " + std::to_string(kFormatVersion) +
                          ")");
  if (uint64_t h = fnv1a64(m.config_text()); h != m.config_hash())
    throw CheckpointError(path + ": config_hash " + hex64(m.config_hash()) +
                          " does not match the FNV-1a of config_text (" + hex64(h) + ")");
  auto non_negative = [&](const char* field, int64_t v) {
    if (v < 0) throw CheckpointError(path + ": " + field + " is " + std::to_string(v) + " (< 0)");
  };
  non_negative("step", m.step());
  non_negative("consumed_samples", m.consumed_samples());
  non_negative("successful_updates", m.successful_updates());
  non_negative("skipped_updates", m.skipped_updates());
  non_negative("lr_schedule_samples", m.lr_schedule_samples());
  non_negative("data_position.consumed_samples", m.data_position().consumed_samples());
  non_negative("data_position.epoch", m.data_position().epoch());
  if (m.topology().data() < 1 || m.topology().pipeline() < 1 || m.topology().tensor() < 1)
    throw CheckpointError(path + ": topology sizes must be >= 1");
  std::set<std::string> files, rng_names;
  for (const auto& r : m.rng())
    if (!rng_names.insert(r.name()).second)
      throw CheckpointError(path + ": RNG state '" + r.name() + "' appears twice");
  std::map<std::pair<std::string, int>, Shape> shapes;
  for (const auto& shard : m.shard()) {
    const std::string where = path + ": shard '" + shard.file() + "'";
    try {
      check_shard_file_name(shard.file());
    } catch (const CheckpointError& e) {
      throw CheckpointError(path + ": " + e.what());
    }
    if (!files.insert(shard.file()).second)
      throw CheckpointError(where + " is listed twice");
    if (shard.size_bytes() < kShardHeaderBytes + kShardFooterBytes)
      throw CheckpointError(where + ": size_bytes " + std::to_string(shard.size_bytes()) +
                            " is too small for a shard file");
    for (int i = 0; i < shard.piece_size(); ++i) {
      const auto& p = shard.piece(i);
      check_piece(p, kShardHeaderBytes, shard.size_bytes() - kShardFooterBytes,
                  where + " piece " + std::to_string(i));
      auto [it, fresh] = shapes.emplace(std::pair(p.name(), int(p.kind())), piece_shape(p));
      if (!fresh && it->second != piece_shape(p))
        throw CheckpointError(where + ": " + tensor_label(p.name(), p.kind()) +
                              " has global shape " + shape_string(piece_shape(p)) +
                              " here and " + shape_string(it->second) + " in another piece");
    }
  }
}

CheckpointManifest read_manifest(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/" + std::string(kManifestFile);
  return decode_manifest(read_file(path), path);
}

}  // namespace troupe::ckpt
