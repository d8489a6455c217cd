#include "ckpt/reader.h"

#include <filesystem>

#include <google/protobuf/util/message_differencer.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_writer.h"
#include "util/crc32c.h"

namespace troupe::ckpt {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}


// Verifies one mapped shard against its manifest record; returns the problem or "".
std::string check_shard(const ShardFile& record, const char* bytes, uint64_t size, const std::string& path,
                        ShardCheck& check) {
  check.actual_size = size;
  if (size != record.size_bytes()) {
    int lost = 0;
    for (const auto& p : record.piece())
      if (p.byte_offset() + piece_bytes(p) > size) ++lost;
    return "size " + std::to_string(size) + " bytes, manifest says " +
           std::to_string(record.size_bytes()) +
           (lost ? " (" + std::to_string(lost) + " of " + std::to_string(record.piece_size()) +
                       " pieces reach past the end)"
                 : "");
  }
  check.actual_crc = util::crc32c(bytes, size);
  if (check.actual_crc != record.crc32c()) {
    std::string damaged;
    int n = 0;
    for (const auto& p : record.piece()) {
      if (util::crc32c(bytes + p.byte_offset(), piece_bytes(p)) == p.crc32c()) continue;
      if (n++ < 4) damaged += (n > 1 ? ", " : "") + tensor_label(p.name(), p.kind());
    }
    if (n > 4) damaged += ", ... (" + std::to_string(n) + " pieces)";
    return "CRC-32C " + hex32(check.actual_crc) + ", manifest says " + hex32(record.crc32c()) +
           (n ? "; damaged data of " + damaged : "; damage outside piece data (header/table)");
  }
  try {
    ShardTable table = read_shard_table(bytes, size, path);
    ShardTable expected;
    *expected.mutable_piece() = record.piece();
    if (!google::protobuf::util::MessageDifferencer::Equals(table, expected))
      return "the file's own piece table differs from the manifest's";
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

void Checkpoint::index_manifest() {
  const int n = manifest_.shard_size();
  checks_.resize(n);
  files_.resize(n);
  for (int s = 0; s < n; ++s) {
    const ShardFile& record = manifest_.shard(s);
    for (int p = 0; p < record.piece_size(); ++p) {
      auto& entry = index_[Key(record.piece(p).name(), int(record.piece(p).kind()))];
      entry.shape = piece_shape(record.piece(p));  // check_manifest: all pieces agree
      entry.refs.push_back({s, p});
    }
    checks_[s].file = record.file();
  }
}

void Checkpoint::enforce(Verify verify) const {
  if (verify != Verify::kStrict || !damaged()) return;
  std::string msg = dir_ + ": damaged checkpoint:";
  for (const auto& line : damage()) msg += "\n  " + line;
  throw CheckpointError(msg);
}

Checkpoint Checkpoint::open(const std::string& dir, Verify verify) {
  Checkpoint c;
  c.dir_ = dir;
  c.manifest_ = read_manifest(dir);
  c.index_manifest();
  for (int s = 0; s < c.manifest_.shard_size(); ++s) {
    ShardCheck& check = c.checks_[s];
    const std::string path = c.shard_path(s);
    if (!std::filesystem::exists(path)) {
      check.problem = "missing (listed in the manifest)";
      continue;
    }
    check.present = true;
    try {
      auto file = std::make_shared<util::MappedFile>(util::MappedFile::open(path, "shard file", /*sequential=*/true));
      c.files_[s] = {file, file->chars(), file->size()};
      check.problem = check_shard(c.manifest_.shard(s), file->chars(), file->size(), path, check);
    } catch (const util::FileError& e) {
      check.problem = e.what();
    } catch (const CheckpointError& e) {
      check.problem = e.what();
    }
  }
  c.enforce(verify);
  return c;
}

Checkpoint Checkpoint::from_memory(std::string label, CheckpointManifest manifest,
                                   const std::map<std::string, std::shared_ptr<const std::string>>& shards,
                                   Verify verify) {
  Checkpoint c;
  c.dir_ = std::move(label);
  c.manifest_ = std::move(manifest);
  c.index_manifest();
  for (int s = 0; s < c.manifest_.shard_size(); ++s) {
    ShardCheck& check = c.checks_[s];
    const auto it = shards.find(check.file);
    if (it == shards.end() || !it->second) {
      check.problem = "missing (listed in the manifest, not held in memory)";
      continue;
    }
    check.present = true;
    c.files_[s] = {it->second, it->second->data(), it->second->size()};
    try {
      check.problem = check_shard(c.manifest_.shard(s), it->second->data(), it->second->size(), c.shard_path(s), check);
    } catch (const CheckpointError& e) {
      check.problem = e.what();
    }
  }
  c.enforce(verify);
  return c;
}

bool Checkpoint::damaged() const {
  return std::any_of(checks_.begin(), checks_.end(), [](const auto& c) { return !c.ok(); });
}

std::vector<std::string> Checkpoint::damage() const {
  std::vector<std::string> out;
  for (size_t s = 0; s < checks_.size(); ++s)
    if (!checks_[s].ok()) out.push_back(shard_path(int(s)) + ": " + checks_[s].problem);
  return out;
}

std::string Checkpoint::shard_path(int shard) const {
  return dir_ + "/" + manifest_.shard(shard).file();
}

std::vector<TensorInfo> Checkpoint::tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& [key, entry] : index_) {
    TensorInfo t{key.first, TensorKind(key.second), entry.shape, 0, 0};
    for (const auto& r : entry.refs) {
      const auto& p = manifest_.shard(r.shard).piece(r.piece);
      ++t.pieces;
      t.stored_elements += p.flat_end() - p.flat_begin();
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool Checkpoint::has(const std::string& name, TensorKind kind) const {
  return index_.count(Key(name, int(kind))) > 0;
}

const Checkpoint::Entry& Checkpoint::entry(const std::string& name, TensorKind kind) const {
  auto it = index_.find(Key(name, int(kind)));
  if (it == index_.end())
    throw CheckpointError(dir_ + ": no tensor " + tensor_label(name, kind) + " in the checkpoint");
  return it->second;
}

const Shape& Checkpoint::shape(const std::string& name, TensorKind kind) const {
  return entry(name, kind).shape;
}

const float* Checkpoint::piece_data(const PieceRef& ref) const {
  const auto& p = manifest_.shard(ref.shard).piece(ref.piece);
  return reinterpret_cast<const float*>(files_[ref.shard].data + p.byte_offset());
}

std::vector<float> Checkpoint::read(const std::string& name, TensorKind kind) const {
  return read(name, kind, Region::whole(shape(name, kind)));
}

std::vector<float> Checkpoint::read(const std::string& name, TensorKind kind,
                                    const Region& region) const {
  std::vector<float> out(size_t(std::max<int64_t>(region.elements(), 0)));
  read_into(name, kind, region, out);
  return out;
}

void Checkpoint::read_into(const std::string& name, TensorKind kind, const Region& region,
                           std::span<float> out) const {
  const std::string label = dir_ + ": " + tensor_label(name, kind);
  const Entry& e = entry(name, kind);
  check_region(e.shape, region, label + ": requested region");
  if (int64_t(out.size()) != region.elements())
    throw CheckpointError(label + ": output holds " + std::to_string(out.size()) +
                          " values, region has " + std::to_string(region.elements()));
  const auto& refs = e.refs;
  for (const auto& r : refs)
    if (!checks_[r.shard].ok())
      throw CheckpointError(label + ": a piece lives in damaged shard " + shard_path(r.shard) +
                            " (" + checks_[r.shard].problem + ")");

  std::vector<uint8_t> covered(out.size(), 0);
  // Global coordinates of output element j, for messages.
  auto where = [&](int64_t j) {
    Shape local(region.box.size()), coords(region.box.size());
    int64_t rest = region.flat_begin + j;
    for (size_t d = region.box.size(); d-- > 0;) {
      coords[d] = region.box[d].offset + rest % region.box[d].extent;
      rest /= region.box[d].extent;
    }
    return shape_string(coords);
  };
  // The shard of an earlier piece that also holds output element j.
  auto earlier_holder = [&](size_t before, int64_t j) {
    Region one = region;
    one.flat_begin = region.flat_begin + j;
    one.flat_end = one.flat_begin + 1;
    for (size_t k = 0; k < before; ++k) {
      bool hit = false;
      for_each_overlap(piece_region(manifest_.shard(refs[k].shard).piece(refs[k].piece)), one,
                       [&](const Overlap&) { hit = true; });
      if (hit) return shard_path(refs[k].shard);
    }
    return std::string("?");
  };

  for (size_t k = 0; k < refs.size(); ++k) {
    const auto& piece = manifest_.shard(refs[k].shard).piece(refs[k].piece);
    const float* src = piece_data(refs[k]);
    for_each_overlap(piece_region(piece), region, [&](const Overlap& o) {
      uint8_t* flags = covered.data() + o.dst;
      float* dst = out.data() + o.dst;
      const float* from = src + o.src;
      if (!std::memchr(flags, 1, size_t(o.count))) {
        std::memcpy(dst, from, size_t(o.count) * sizeof(float));
        std::memset(flags, 1, size_t(o.count));
        return;
      }
      for (int64_t i = 0; i < o.count; ++i) {
        if (!flags[i]) {
          dst[i] = from[i];
          flags[i] = 1;
        } else if (std::memcmp(dst + i, from + i, sizeof(float)) != 0) {
          throw CheckpointError(label + ": replicated copies differ at element " +
                                where(o.dst + i) + " (" + shard_path(refs[k].shard) + " vs " +
                                earlier_holder(k, o.dst + i) + ")");
        }
      }
    });
  }
  const auto first_hole = std::find(covered.begin(), covered.end(), uint8_t(0));
  if (first_hole != covered.end()) {
    const int64_t holes = std::count(covered.begin(), covered.end(), uint8_t(0));
    throw CheckpointError(label + ": " + std::to_string(holes) + " of " +
                          std::to_string(covered.size()) + " elements of " +
                          region_string(region) + " are in no piece (first at " +
                          where(first_hole - covered.begin()) + ")");
  }
}

Checkpoint open_step(const std::string& root, int64_t step) {
  const std::string dir = root + "/" + step_dir_name(step);
  Checkpoint c = Checkpoint::open(dir, Checkpoint::Verify::kStrict);
  if (c.step() != step) throw CheckpointError(dir + ": manifest says step " + std::to_string(c.step()));
  check_counters(c.manifest(), dir + "/" + std::string(kManifestFile));
  return c;
}

LoadOutcome load_latest(const std::string& root) {
  LoadOutcome out;
  int64_t latest = -1;  // -1: no readable `latest`
  bool latest_readable = true;
  try {
    latest = read_latest(root).value_or(-1);
  } catch (const CheckpointError& e) {
    latest_readable = false;
    out.damage_found = true;
    out.report.push_back(e.what());
  }
  const std::vector<int64_t> steps = list_step_dirs(root);
  std::vector<int64_t> candidates;
  if (latest >= 0) {
    candidates.push_back(latest);
    for (auto s = steps.rbegin(); s != steps.rend(); ++s) {
      if (*s > latest)
        out.report.push_back(root + "/" + step_dir_name(*s) +
                             ": ignored, newer than latest (never committed)");
      else if (*s < latest)
        candidates.push_back(*s);
    }
  } else {
    if (latest_readable && !steps.empty())
      out.report.push_back(root + "/" + std::string(kLatestFile) +
                           ": missing; trying every step directory, newest first");
    candidates.assign(steps.rbegin(), steps.rend());
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    try {
      out.checkpoint.emplace(open_step(root, candidates[i]));
      return out;
    } catch (const CheckpointError& e) {
      out.damage_found = true;
      out.report.push_back(std::string(e.what()) +
                           (i + 1 < candidates.size()
                                ? "\n  -> falling back to " + step_dir_name(candidates[i + 1])
                                : "\n  -> no older checkpoint to fall back to"));
    }
  }
  return out;
}

Checkpoint open_checkpoint_path(const std::string& path, std::vector<std::string>* report) {
  if (std::filesystem::exists(path + "/" + std::string(kManifestFile))) {
    Checkpoint c = Checkpoint::open(path, Checkpoint::Verify::kStrict);
    check_counters(c.manifest(), path + "/" + std::string(kManifestFile));
    return c;
  }
  LoadOutcome outcome = load_latest(path);
  if (report) *report = outcome.report;
  if (!outcome.checkpoint) {
    std::string msg = path + ": no complete checkpoint (neither a checkpoint directory with " +
                      std::string(kManifestFile) + " nor a root with a loadable one)";
    for (const auto& line : outcome.report) msg += "\n  " + line;
    throw CheckpointError(msg);
  }
  return std::move(*outcome.checkpoint);
}

}  // namespace troupe::ckpt
