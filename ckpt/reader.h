// Reading checkpoints: verification of every shard (size, CRC-32C, piece table),
// assembly of any region of any tensor from whichever pieces cover it (the
// resharding path), and finding the newest complete checkpoint with fallback.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "util/durable_file.h"
#include "ckpt/piece.h"
#include "ckpt/region.h"
#include "messages/checkpoint.pb.h"

namespace troupe::ckpt {

// What verification found for one shard file of the manifest.
struct ShardCheck {
  std::string file;
  bool present = false;
  uint64_t actual_size = 0;
  uint32_t actual_crc = 0;  // computed only when the size matches
  // Empty when the shard is intact; otherwise one line naming the damage, e.g.
  // "size 4096 bytes, manifest says 8256" or "CRC-32C 0x1a2b3c4d, manifest says ...".
  std::string problem;
  bool ok() const { return problem.empty(); }
};

// One (name, kind) tensor of a checkpoint.
struct TensorInfo {
  std::string name;
  TensorKind kind;
  Shape shape;
  int pieces = 0;
  int64_t stored_elements = 0;  // summed over pieces (> elements when replicated)
};

// An opened checkpoint. Its shards stay mapped while it lives; the const methods
// keep no mutable state, so several threads may read from one Checkpoint at once.
class Checkpoint {
 public:
  enum class Verify {
    kStrict,  // any damaged shard throws CheckpointError listing all damage
    kReport,  // damage is recorded in shard_checks(); reads touching it throw
  };

  // Opens a checkpoint directory: reads and checks the manifest, maps every shard,
  // verifies size, whole-file CRC-32C and that the shard's own piece table equals
  // the manifest's. Manifest problems always throw.
  static Checkpoint open(const std::string& dir, Verify verify = Verify::kStrict);
  // A checkpoint held in memory (engine/state_mirror.h): `manifest` and the bytes of each
  // of its shard files by file name, verified as open() verifies files (size, CRC-32C,
  // piece table). `label` names it where a directory would ("mirror of step 12").
  // Nothing touches the disk.
  static Checkpoint from_memory(std::string label, CheckpointManifest manifest,
                                const std::map<std::string, std::shared_ptr<const std::string>>& shards,
                                Verify verify = Verify::kStrict);

  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  int64_t step() const { return manifest_.step(); }
  const std::vector<ShardCheck>& shard_checks() const { return checks_; }
  bool damaged() const;
  // One line per damaged shard: "DIR/FILE: <problem>".
  std::vector<std::string> damage() const;

  // Every tensor, sorted by name then kind.
  std::vector<TensorInfo> tensors() const;
  bool has(const std::string& name, TensorKind kind) const;
  // Global shape; throws naming the tensor when the checkpoint lacks it.
  const Shape& shape(const std::string& name, TensorKind kind) const;

  // The whole global tensor, row-major.
  std::vector<float> read(const std::string& name, TensorKind kind) const;
  // `region` of the global tensor (a box and a flat range of it), assembled from
  // every piece that overlaps it. Replicated copies must be bitwise equal and every
  // element must be covered; either failure throws naming the tensor, the element
  // and the shards.
  std::vector<float> read(const std::string& name, TensorKind kind, const Region& region) const;
  void read_into(const std::string& name, TensorKind kind, const Region& region,
                 std::span<float> out) const;

 private:
  struct PieceRef {
    int shard;
    int piece;
  };
  using Key = std::pair<std::string, int>;  // name, kind
  struct Entry {
    Shape shape;
    std::vector<PieceRef> refs;
  };
  const Entry& entry(const std::string& name, TensorKind kind) const;
  const float* piece_data(const PieceRef& ref) const;
  std::string shard_path(int shard) const;

  // A shard's bytes: a mapped file or a string in memory (`owner` keeps either alive).
  struct ShardBytes {
    std::shared_ptr<const void> owner;  // null for a missing shard
    const char* data = nullptr;
    uint64_t size = 0;
  };
  // Indexes the manifest's pieces and sizes checks_ and files_.
  void index_manifest();
  // Throws under kStrict when any shard is damaged.
  void enforce(Verify verify) const;

  std::string dir_;
  CheckpointManifest manifest_;
  std::vector<ShardCheck> checks_;
  std::vector<ShardBytes> files_;
  std::map<Key, Entry> index_;
};

// The result of looking for the checkpoint to resume from.
struct LoadOutcome {
  std::optional<Checkpoint> checkpoint;  // none: nothing loadable
  // What was skipped and why, newest first: damaged checkpoints (file, expected vs
  // actual size or CRC), a missing or unreadable `latest`, uncommitted directories.
  std::vector<std::string> report;
  // True when a checkpoint that should have loaded was damaged.
  bool damage_found = false;
};

// ROOT/step_N opened as a candidate to resume from: verified strictly, its manifest
// naming step N and keeping the counter rules (check_counters). Throws CheckpointError
// saying what is wrong.
Checkpoint open_step(const std::string& root, int64_t step);

// The newest complete checkpoint under ROOT: the one ROOT/latest names, verified;
// when it is damaged, the newest older step directory that verifies. Directories
// newer than `latest` were never committed and are ignored. Without a readable
// `latest`, every step directory is a candidate, newest first. A candidate must keep
// the manifest's counter rules (check_counters) too. Never throws for
// damage (it is reported); throws only when ROOT cannot be listed.
LoadOutcome load_latest(const std::string& root);

// A path given by a user: a checkpoint directory (holds manifest.pb) opens
// directly (strictly, counters checked); anything else is treated as a root and resolved with
// load_latest. `report` receives load_latest's report lines.
Checkpoint open_checkpoint_path(const std::string& path, std::vector<std::string>* report);

}  // namespace troupe::ckpt
