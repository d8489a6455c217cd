// The points of the commit protocol (ckpt/commit.h) at which a crash can happen.
// Tests pass a hook that is called right after each point and kills the process
// there, then check that loading yields the old or the new checkpoint, complete.
#pragma once

#include <functional>

namespace troupe::ckpt {

enum class CommitPoint {
  kPartialDirCreated,    // ROOT/step_N.partial/ exists, empty
  kShardTempWritten,     // one shard written and fsynced under FILE.tmp
  kShardRenamed,         // that shard renamed to FILE
  kManifestTempWritten,  // manifest.pb.tmp written and fsynced
  kManifestRenamed,      // manifest.pb in place (directory not yet fsynced)
  kPartialDirSynced,     // step_N.partial/ fsynced: its content is durable
  kStepDirRenamed,       // step_N.partial/ renamed to step_N/ (ROOT not yet fsynced)
  kRootSynced,           // ROOT fsynced: step_N/ is durable
  kLatestTempWritten,    // latest.tmp written and fsynced
  kLatestRenamed,        // latest replaced (ROOT not yet fsynced)
  kLatestSynced,         // ROOT fsynced: the new checkpoint is the committed one
  kOldCheckpointRemoved, // one superseded directory (old step, stale .partial) removed
};

inline constexpr CommitPoint kAllCommitPoints[] = {
    CommitPoint::kPartialDirCreated,   CommitPoint::kShardTempWritten,
    CommitPoint::kShardRenamed,        CommitPoint::kManifestTempWritten,
    CommitPoint::kManifestRenamed,     CommitPoint::kPartialDirSynced,
    CommitPoint::kStepDirRenamed,      CommitPoint::kRootSynced,
    CommitPoint::kLatestTempWritten,   CommitPoint::kLatestRenamed,
    CommitPoint::kLatestSynced,        CommitPoint::kOldCheckpointRemoved,
};

const char* commit_point_name(CommitPoint point);

// Called after each point; may throw or end the process. Empty: no hook.
using CommitHook = std::function<void(CommitPoint)>;

}  // namespace troupe::ckpt
