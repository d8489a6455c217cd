// The commit protocol: how a checkpoint comes into existence so that a crash at
// any moment leaves either the previous or the new checkpoint complete, never a
// half one that loads (docs/checkpoints.md explains why each step is needed).
//
//   1. begin(): mkdir ROOT/step_N.partial/ (a stale one of the same step is renamed to
//      step_N.partial.deleting/ first, then removed)
//   2. writers write their shards into it (ShardWriter: FILE.tmp, fsync, rename)
//   3. commit(): manifest.pb.tmp, fsync, rename to manifest.pb, fsync step_N.partial/
//   4. rename step_N.partial/ to step_N/ (an old step_N/ from an abandoned run is
//      first moved aside to step_N.deleting/), fsync ROOT
//   5. latest.tmp holding "step_N\n", fsync, rename to latest, fsync ROOT
//   6. prune: remove *.partial/, *.deleting/, step dirs newer than N (abandoned
//      timeline), and all but the newest keep_last step dirs up to N
//
// The checkpoint is committed at the rename of `latest` (5). Removal (6) renames a
// directory to NAME.deleting/ before deleting its files, so a half-deleted
// checkpoint never carries a loadable name. One commit at a time per ROOT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/commit_point.h"
#include "messages/checkpoint.pb.h"

namespace troupe::ckpt {

// "step_00000042": the step zero-padded to (at least) 8 digits.
std::string step_dir_name(int64_t step);
// The step of a name of exactly that form ("step_" + 8 or more digits), else nullopt.
std::optional<int64_t> parse_step_dir_name(std::string_view name);

// The steps of the ROOT/step_N directories (complete or not), ascending.
std::vector<int64_t> list_step_dirs(const std::string& root);

// The step named by ROOT/latest; nullopt when the file does not exist. Throws
// CheckpointError when it exists but does not hold a step directory name.
std::optional<int64_t> read_latest(const std::string& root);

class CheckpointCommit {
 public:
  // Creates ROOT (if needed) and ROOT/step_N.partial/. Refuses (CheckpointError) a
  // step that ROOT/latest already names: a committed checkpoint is never rewritten.
  static CheckpointCommit begin(std::string root, int64_t step, CommitHook hook = {});

  // Where the shard writers write (ShardWriter's dir).
  const std::string& partial_dir() const { return partial_dir_; }
  const std::string& root() const { return root_; }
  int64_t step() const { return step_; }
  // The hook, for the shard writers of this checkpoint.
  const CommitHook& hook() const { return hook_; }

  // Steps 3 to 6. `manifest` carries everything but format_version (set here); its
  // step must equal step() and it must list every shard, each present in
  // partial_dir() with the recorded size. keep_last = 0 keeps every checkpoint.
  // Returns the final directory ROOT/step_N.
  std::string commit(CheckpointManifest manifest, int keep_last);
  // A save that failed: its step_N.partial/ is set aside (step_N.partial.deleting/) and
  // removed, so a failed save leaves nothing behind. Throws CheckpointError when the
  // directory cannot be removed (the next commit's prune tries again).
  void discard();

 private:
  CheckpointCommit(std::string root, int64_t step, CommitHook hook);
  std::string root_;
  int64_t step_;
  CommitHook hook_;
  std::string partial_dir_;
};

// Step 6 on its own: what commit() runs after `latest` names `latest_step`.
void prune_checkpoints(const std::string& root, int64_t latest_step, int keep_last,
                       const CommitHook& hook = {});

}  // namespace troupe::ckpt
