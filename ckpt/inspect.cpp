#include "ckpt/inspect.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <map>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"

namespace troupe::ckpt {
namespace {

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string human_bytes(uint64_t n) {
  if (n >= (uint64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(n) / double(1ull << 30));
  if (n >= (uint64_t(1) << 20)) return fmt::format("{:.2f} MiB", double(n) / double(1ull << 20));
  if (n >= (uint64_t(1) << 10)) return fmt::format("{:.2f} KiB", double(n) / double(1ull << 10));
  return fmt::format("{} B", n);
}

std::string hex_prefix(const std::string& bytes, size_t n) {
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < n; ++i)
    s += fmt::format("{:02x}", static_cast<unsigned char>(bytes[i]));
  if (bytes.size() > n) s += "...";
  return s;
}

void print_manifest(const Checkpoint& c, std::ostream& out) {
  const CheckpointManifest& m = c.manifest();
  out << fmt::format("checkpoint {}\n", c.dir());
  out << fmt::format("  format version      {}\n", m.format_version());
  out << fmt::format("  step                {}\n", m.step());
  out << fmt::format("  consumed samples    {}\n", m.consumed_samples());
  out << fmt::format("  updates             {} successful, {} skipped\n", m.successful_updates(),
                     m.skipped_updates());
  out << fmt::format("  LR schedule at      {} samples (successful updates only)\n",
                     m.lr_schedule_samples());
  out << fmt::format("  data position       {} samples consumed, epoch {}\n",
                     m.data_position().consumed_samples(), m.data_position().epoch());
  for (const auto& d : m.data_position().datasets())
    out << fmt::format("    blend dataset     {}: {} samples, {} tokens\n", d.prefix(), d.consumed_samples(),
                       d.consumed_tokens());
  out << fmt::format("  topology            data {} x pipeline {} x tensor {}\n",
                     m.topology().data(), m.topology().pipeline(), m.topology().tensor());
  if (m.topology().physical_replicas() > 0 && m.topology().physical_replicas() != m.topology().data())
    out << fmt::format("  placement           {} physical replicas computed the {} logical ones\n",
                       m.topology().physical_replicas(), m.topology().data());
  out << fmt::format("  config hash         0x{:016x} (FNV-1a 64 of the config text; matches)\n",
                     m.config_hash());
  out << fmt::format("  RNG states          {}\n", m.rng_size());
  for (const auto& r : m.rng())
    out << fmt::format("    {:<24} {:>4} bytes  {}\n", r.name(), r.state().size(),
                       hex_prefix(r.state(), 16));
}

}  // namespace

int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err,
                       const InspectOptions& options) {
  std::string dir = path;
  try {
    if (!is_file(path + "/" + std::string(kManifestFile))) {
      auto latest = read_latest(path);
      if (!latest) {
        err << path << ": neither a checkpoint directory (no " << kManifestFile
            << ") nor a checkpoint root (no " << kLatestFile << ")\n";
        return 1;
      }
      dir = path + "/" + step_dir_name(*latest);
      out << fmt::format("root {}: latest -> {}", path, step_dir_name(*latest));
      const auto steps = list_step_dirs(path);
      if (!steps.empty()) {
        out << " (step directories:";
        for (int64_t s : steps) out << " " << s;
        out << ")";
      }
      out << "\n";
    }
    const Checkpoint c = Checkpoint::open(dir, Checkpoint::Verify::kReport);
    print_manifest(c, out);
    if (options.show_config) out << "config:\n" << c.manifest().config_text();

    const CheckpointManifest& m = c.manifest();
    uint64_t total = 0;
    for (const auto& s : m.shard()) total += s.size_bytes();
    out << fmt::format("shards ({}, {}):\n", m.shard_size(), human_bytes(total));
    out << fmt::format("  {:<28} {:>14} {:>10} {:>7}  {}\n", "file", "bytes", "crc32c",
                       "pieces", "status");
    for (int i = 0; i < m.shard_size(); ++i) {
      const auto& s = m.shard(i);
      const auto& check = c.shard_checks()[size_t(i)];
      out << fmt::format("  {:<28} {:>14} 0x{:08x} {:>7}  {}{}\n", s.file(), s.size_bytes(),
                         s.crc32c(), s.piece_size(), check.ok() ? "ok" : "DAMAGED",
                         s.writer().empty() ? "" : "  (" + s.writer() + ")");
    }

    // Which shards each tensor touches, to skip assembly when one is damaged.
    std::map<std::pair<std::string, int>, bool> touches_damage;
    for (int i = 0; i < m.shard_size(); ++i)
      for (const auto& p : m.shard(i).piece())
        touches_damage[{p.name(), int(p.kind())}] |= !c.shard_checks()[size_t(i)].ok();

    int bad_tensors = 0;
    const auto tensors = c.tensors();
    out << fmt::format("tensors ({}):\n", tensors.size());
    out << fmt::format("  {:<32} {:<10} {:<16} {:>6} {:>8}  {}\n", "name", "kind", "shape",
                       "pieces", "copies", "status");
    std::vector<std::string> tensor_errors;
    for (const auto& t : tensors) {
      std::string status = "listed";
      if (touches_damage[{t.name, int(t.kind)}]) {
        status = "in a damaged shard";
      } else if (options.assemble) {
        try {
          (void)c.read(t.name, t.kind);
          status = "ok";
        } catch (const CheckpointError& e) {
          status = "BAD";
          ++bad_tensors;
          tensor_errors.push_back(e.what());
        }
      }
      const double copies = double(t.stored_elements) / double(shape_elements(t.shape));
      out << fmt::format("  {:<32} {:<10} {:<16} {:>6} {:>8.2f}  {}\n", t.name,
                         kind_name(t.kind), shape_string(t.shape), t.pieces, copies, status);
    }

    const auto damage = c.damage();
    for (const auto& line : damage) err << line << "\n";
    for (const auto& line : tensor_errors) err << line << "\n";
    if (!damage.empty() || bad_tensors > 0) {
      err << fmt::format("{}: DAMAGED ({} shard(s), {} tensor(s))\n", dir, damage.size(),
                         bad_tensors);
      return 1;
    }
    out << fmt::format("verified: {} shards, sizes and CRC-32C match{}\n", m.shard_size(),
                       options.assemble ? "; every tensor assembles completely" : "");
    return 0;
  } catch (const CheckpointError& e) {
    err << e.what() << "\n";
    return 1;
  }
}

}  // namespace troupe::ckpt
