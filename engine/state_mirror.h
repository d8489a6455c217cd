// The state mirror (docs/checkpoints.md, "The state mirror"; supervision.state_mirror):
// a checkpoint of every step, held in memory outside the training group, so that a group
// restart resumes from the newest mirrored step instead of the newest checkpoint on disk.
//
// After each update every optimizer shard that writes a checkpoint shard hands a copy of
// its state (parameters and both Adam moments of its range) to the process's mirror
// keeper (actors/mirror_keeper.h), which serializes it as the bytes its shard file would
// hold (CRC-32C and piece table included) into the MirrorStore and reports the shard's
// record to the coordinator. Once the coordinator has every shard's record of a step and
// that step's position (MirrorAssembly), it files the step's manifest in the MirrorBook.
// A later start of the group (engine::ResumeSource) opens the newest filed manifest over
// the stored bytes (ckpt::Checkpoint::from_memory: verified as a checkpoint on disk is)
// when it is newer than the newest checkpoint on disk.
//
// Both outlive every training group of the run; a rollback past a spike clears them (its
// steps are of the timeline the run leaves).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpointing.h"
#include "messages/checkpoint.pb.h"

namespace troupe::engine {

// `s` as the bytes of shard file `file` (bit for bit what write_shard writes), and the
// record a manifest lists for it.
struct SerializedShard {
  ShardFile record;
  std::shared_ptr<const std::string> bytes;
};
SerializedShard serialize_shard(const ckpt::FlatLayout& layout, const ShardState& s, const std::string& file,
                                const std::string& writer);
// The same from the three buffers of `range` (range.end - range.begin values each),
// read once: the bytes are the one copy made.
SerializedShard serialize_shard(const ckpt::FlatLayout& layout, const model::FlatRange& range, const float* params,
                                const float* exp_avg, const float* exp_avg_sq, const std::string& file,
                                const std::string& writer, std::shared_ptr<std::string> into = nullptr);

// One process's mirrored shard files, by file name and step. A file keeps every step
// from the newest complete mirror's on (the coordinator's completion is told through
// MirrorBook, or forget_before), at most kStepsPerFile: the newest step of one file may
// be kept before another file's previous step arrives. Thread-safe.
//
// The timeline: clear() (a rollback) starts another, and what a shard of the timeline
// left behind sends later (a copy still on its way) is not kept.
class MirrorStore {
 public:
  static constexpr size_t kStepsPerFile = 4;

  int64_t timeline() const;
  // An empty string to serialize the next shard of `file` into: one this store let go of
  // (a forgotten step's, held by nobody else) when there is one, so that its memory is
  // reused (fresh pages cost a page fault each: a third of the mirror's time on the
  // small model), else a new one.
  std::shared_ptr<std::string> buffer(const std::string& file);
  // False (nothing kept) when `timeline` is not the current one.
  bool keep(int64_t timeline, int64_t step, const std::string& file, std::shared_ptr<const std::string> bytes);
  // The bytes of `file` at `step`, or null.
  std::shared_ptr<const std::string> find(int64_t step, const std::string& file) const;
  // Drops every step below `step` (a complete mirror of `step` exists).
  void forget_before(int64_t step);
  void clear();
  // Bytes held, over every file and step.
  int64_t bytes_held() const;

 private:
  mutable std::mutex mu_;
  // Drops a step's bytes, keeping them for buffer() when nothing else holds them (locked).
  void release_locked(const std::string& file, std::shared_ptr<const std::string> bytes);

  int64_t timeline_ = 0;
  std::map<std::string, std::map<int64_t, std::shared_ptr<const std::string>>> by_file_;
  std::map<std::string, std::shared_ptr<std::string>> spare_;  // at most one per file
};

// Cluster mode: which workers hold one shard file of a mirrored step (in one process
// the MirrorStore does), and the rank whose shard it is.
struct MirrorHolders {
  Rank rank;
  std::vector<int32_t> workers;
};
using MirrorHolderMap = std::map<std::string, MirrorHolders>;  // by shard file name

// The coordinator's side: the records of each step's mirrored shards and the position at
// the step's close, in whichever order they come; a step is complete with both.
class MirrorAssembly {
 public:
  struct Complete {
    int64_t step = 0;
    TrainingPosition position;
    std::vector<ShardFile> shards;  // sorted by file name
    MirrorHolderMap holders;        // cluster mode
  };
  // `shards`: how many shard files one step has (the ranks that write a shard).
  explicit MirrorAssembly(size_t shards) : shards_(shards) {}

  std::optional<Complete> closed(int64_t step, const TrainingPosition& position);
  std::optional<Complete> kept(int64_t step, ShardFile record, MirrorHolders holders = {});

 private:
  struct Pending {
    std::optional<TrainingPosition> position;
    std::map<std::string, ShardFile> shards;
    MirrorHolderMap holders;
  };
  std::optional<Complete> take_if_complete(int64_t step);

  size_t shards_;
  int64_t completed_ = -1;
  std::map<int64_t, Pending> pending_;
};

// The newest complete mirror's manifest, and where its bytes are: the store of this
// process (one process), or the workers `holders` names (cluster mode, no store).
// Thread-safe.
class MirrorBook {
 public:
  explicit MirrorBook(std::shared_ptr<MirrorStore> store) : store_(std::move(store)) {}

  // A step whose every shard is held: kept when newer than the one kept; the store
  // forgets older steps.
  void file(CheckpointManifest manifest, MirrorHolderMap holders = {});
  std::optional<CheckpointManifest> newest() const;
  MirrorHolderMap holders() const;  // of the newest
  // The store's timeline (MirrorStore::timeline); 0 in cluster mode, which has no
  // rollback (logging.on_spike ROLLBACK is refused there).
  int64_t timeline() const { return store_ ? store_->timeline() : 0; }
  // The newest mirror opened from the store (one process) as a checkpoint (verified: size, CRC-32C and
  // piece table of every shard). Throws CheckpointError saying what is missing or damaged.
  std::shared_ptr<const ckpt::Checkpoint> open_newest() const;
  // A rollback: the mirrored steps are of the timeline the run leaves.
  void clear();
  const std::shared_ptr<MirrorStore>& store() const { return store_; }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<MirrorStore> store_;
  std::optional<CheckpointManifest> newest_;
  MirrorHolderMap holders_;
};

// Whether supervision.state_mirror puts the mirror on for this run (AUTO: in cluster mode
// with more than one physical replica, where a buddy on another worker exists).
bool state_mirror_on(const Config& c);

// How a mirror's manifest names it where a directory would: "memory: the state mirror of step 12".
std::string mirror_label(int64_t step);

}  // namespace troupe::engine
