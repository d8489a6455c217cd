// The training state <-> checkpoint, without actors: which checkpoint a (re)started
// training group resumes from, restoring a stage's parameters and an optimizer
// shard's moments from it (under any layout it was written in), writing one
// optimizer shard's pieces, and the manifest the coordinator commits.
//
// What is stored, by name and global slice (ckpt/flat_layout.h):
//   param       the model weights; on the CPU they are also the fp32 master weights,
//               so no separate "master" pieces are written (a GPU shard writes both)
//   exp_avg     Adam's first moment      exp_avg_sq  Adam's second moment
// Each distributed-optimizer shard writes the flat range of its stage it owns; with
// a replicated optimizer, data-parallel rank 0 writes the whole stage.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ckpt/flat_layout.h"
#include "ckpt/hf_import.h"
#include "ckpt/reader.h"
#include "ckpt/shard_writer.h"
#include "engine/optimizer_shard.h"
#include "engine/topology.h"
#include "messages/checkpoint.pb.h"
#include "model/gpt_stage.h"

namespace troupe::engine {

// The checkpoint root of a config: checkpoint.dir, or RUN_DIR/checkpoints.
std::string checkpoint_root(const Config& c);

// PATH + suffix, or PATH + suffix + "-N" for the first N that names nothing yet: where
// checkpoints that leave a root's timeline are put (never deleted).
std::string unused_name_beside(const std::string& path, const std::string& suffix);

// A fresh start (checkpoint.load empty) into a checkpoint root that already holds
// checkpoints of an earlier run: that root is renamed to ROOT.previous-<unix time>
// (nothing is deleted) so the new run's timeline starts clean. Returns the new name
// of the old root, or "" when there was nothing to set aside.
std::string set_aside_earlier_checkpoints(const Config& c);

// Which checkpoint the training group starts from. The first start follows
// checkpoint.load ("" fresh, "latest", or a path); after a failure (invalidate())
// every start takes the newest complete checkpoint under the root, falling back
// past damaged ones, or starts fresh when there is none.
// A resume's logical layout against the checkpoint's (docs/layout.md). The same
// logical layout on any placement continues bit for bit (said at start when the
// placement changed). Another logical layout reshards, within fp32 tolerance, and says
// so, unless the config places its replicas (parallel.physical_replicas below
// parallel.data): that is a placement change offered on another logical layout,
// refused with config::ConfigError naming the fields and the numbers.
// `placed`: the logical layout on the placement the run starts on (RunState::topology).
void check_resume_layout(const Config& c, const Topology& placed, const ckpt::Checkpoint& ck);

class ShardCopies;  // engine/shard_copies.h
class MirrorBook;   // engine/state_mirror.h

class ResumeSource {
 public:
  // `load`: what the first start reads (engine::RunState::resume_from: "" fresh,
  // "latest", or a checkpoint directory).
  ResumeSource(const Config& c, std::string load);

  // Before a start after a failure reads the newest checkpoint, its shard files that are
  // damaged on disk are rewritten from `copies` (what this process's writers wrote),
  // when the rewrite matches the manifest's size and CRC-32C; said on the console and in
  // report(). Without copies (or without a matching one) the damaged checkpoint is
  // skipped as before.
  void heal_from(std::shared_ptr<const ShardCopies> copies);
  // A start after a failure resumes from the state mirror's newest complete step when it
  // is at least as new as the newest checkpoint on disk (`latest`) and verifies (size,
  // CRC-32C and piece table of every shard in memory): no checkpoint is read. A mirror
  // that does not verify is reported and the disk is read as without it.
  // Cluster mode (the book has no store: the bytes are on the workers): the mirror
  // serves when every shard of it has a holder that `alive` says is still alive; the
  // start's checkpoint is then the mirror's manifest alone (the supervisor reads only
  // its position) and mirror_start() says where each shard is.
  void mirror_from(std::shared_ptr<const MirrorBook> mirror, std::function<bool(int32_t worker)> alive = {});
  // Cluster mode: the holders of the current start's mirror (null when it is not from
  // the mirror): for each shard, its rank and a live worker that holds it.
  struct MirrorStart {
    int64_t step = 0;
    CheckpointManifest manifest;
    std::vector<std::pair<Rank, int32_t>> sources;
  };
  std::shared_ptr<const MirrorStart> mirror_start() const;

  // The checkpoint of the group's current start (null: fresh). Loaded once per start.
  // Throws CheckpointError when checkpoint.load names a checkpoint that does not load,
  // or when the root holds checkpoints but none of them loads (the damage listed).
  std::shared_ptr<const ckpt::Checkpoint> current();
  void invalidate();
  // What the last load skipped and why (damaged checkpoints, missing `latest`).
  std::vector<std::string> report() const;

 private:
  // Rewrites the damaged shard files of the checkpoint `latest` names from copies_
  // (locked; report_ receives what was done).
  void heal_latest();
  // The mirror's newest step as ckpt_, when it serves (locked); false: read the disk.
  bool resume_from_mirror();

  mutable std::mutex mu_;
  std::shared_ptr<const ShardCopies> copies_;
  std::shared_ptr<const MirrorBook> mirror_;
  std::function<bool(int32_t)> alive_;
  std::shared_ptr<const MirrorStart> mirror_start_;
  std::string root_, load_;
  bool stale_ = true, failed_before_ = false;
  std::shared_ptr<const ckpt::Checkpoint> ckpt_;
  std::vector<std::string> report_;
};

// The layout of `reg` for reading from `ck` under any (dp, pp, tp) layout. The
// vocabulary padding of wte depends on parallel.tensor (config::padded_vocab), so a
// checkpoint written under another tensor-parallel size may hold more or fewer
// padding rows: only the vocab_size real rows are read (under the checkpoint's global
// shape, when it has at least those rows); padding rows are left untouched (zero).
ckpt::FlatLayout reading_layout(const ckpt::Checkpoint& ck, const model::ParameterRegistry& reg);

// Parameters of the stage's whole flat buffer from `ck`. Throws CheckpointError
// naming the tensor when the checkpoint cannot supply it.
void restore_stage(const ckpt::Checkpoint& ck, model::GptStage& stage);
// A fresh start from training.init_from: the stage's parameters are its boxes of the
// Hugging Face model's tensors (vocabulary padding zero), whatever the layout; the
// optimizer shards start with zero moments as on any fresh start. The rule of which
// start wins: a checkpoint that ResumeSource returns is restored instead, so a run
// started with init_from resumes from its own checkpoints.
void init_stage_from_hf(const ckpt::HfModel& hf, model::GptStage& stage);
// The model of training.init_from opened and checked against the run (HfModel::open),
// errors prefixed "training.init_from: ". Run before any actor starts.
ckpt::HfModel open_init_from(const std::string& dir, const ModelConfig& model);
ckpt::HfModel open_init_from(const Config& c);
// The shard's moments for its range, and its step counter (successful updates).
void restore_shard(const ckpt::Checkpoint& ck, const model::ParameterRegistry& reg, OptimizerShard& shard);

// A copy of what one optimizer shard writes, taken at a step boundary.
struct ShardState {
  Rank rank;
  model::FlatRange range;
  std::vector<float> params, exp_avg, exp_avg_sq;  // range.end - range.begin values each
};
// Whether this rank writes a shard (all ranks with the distributed optimizer,
// data-parallel rank 0 without).
bool writes_shard(bool distributed_optimizer, const Rank& r);
bool writes_shard(const Config& c, const Rank& r);
// The flat layout of rank r's parameters, which a shard file of that rank follows:
// the checkpoint writer's piece of the Config.
ckpt::FlatLayout shard_layout(const Config& c, const Rank& r);
// Writes `s` (a state of the rank `layout` is of) as shard file `file` into `dir` (the
// checkpoint's .partial directory).
ShardFile write_shard(const ckpt::FlatLayout& layout, const ShardState& s, const std::string& dir,
                      const std::string& file, const std::string& writer);
std::string shard_file_name(const Rank& r);  // "dp0_pp1_tp0.shard"
// The pieces of `s` added to `w` in the order every shard file holds them (write_shard,
// and the state mirror's in-memory shards, engine/state_mirror.h).
void add_shard_pieces(ckpt::ShardWriter& w, const ckpt::FlatLayout& layout, const ShardState& s);
// The same from the three buffers of `range` (range.end - range.begin values each).
void add_shard_pieces(ckpt::ShardWriter& w, const ckpt::FlatLayout& layout, const model::FlatRange& range,
                      const float* params, const float* exp_avg, const float* exp_avg_sq);

// Which directory a path names now. A save's partial directory is recreated when the
// same step is saved again after a restart, and ext4 hands the new one the old one's
// inode at once: the inode's generation (random per allocation on ext4, xfs, btrfs)
// tells them apart. A writer still busy with the earlier attempt compares identities
// to tell that its checkpoint was given up.
struct DirectoryIdentity {
  uint64_t inode = 0;       // 0: no directory there
  uint64_t generation = 0;  // 0: the file system does not say (NFS, some others)
};
DirectoryIdentity directory_identity(const std::string& path);
// Whether `now` is the directory `then` named. Generations count only where both are
// known: hosts sharing a checkpoint directory may differ in what they can see.
bool same_directory(const DirectoryIdentity& then, const DirectoryIdentity& now);

// The counters a manifest records.
struct TrainingPosition {
  int64_t step = 0, consumed_samples = 0, successful_updates = 0, skipped_updates = 0;
  int64_t epoch = 0;
  // With a blend (data.blend): what each dataset gave so far, in the blend's order.
  struct Dataset {
    std::string prefix;
    int64_t samples = 0, tokens = 0;  // tokens: non-padding input tokens
  };
  std::vector<Dataset> datasets;
};
// `placed`: the layout on the placement that wrote it; `skip_samples`: the run state's
// skip list (engine/run_state.h), sorted, each once.
CheckpointManifest make_manifest(const Config& c, const Topology& placed, std::span<const int64_t> skip_samples,
                                 const TrainingPosition& pos, std::vector<ShardFile> shards);
TrainingPosition position_of(const CheckpointManifest& m);

}  // namespace troupe::engine
