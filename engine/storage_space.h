// What a run's checkpoints take on disk and what the disk has: the estimate a failed
// save names, and the check at start that warns when keep_last + 1 checkpoints of this
// layout do not fit on the checkpoint root's file system (docs/runtime.md, "When the
// disk fills up").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "messages/config.pb.h"

namespace troupe::engine {

// Bytes one checkpoint of `c` writes: every stage's parameters and both Adam moments in
// fp32 (what the shard writers write: docs/checkpoints.md), plus the shard files' tables
// and the manifest, rounded up. An estimate to the percent, not to the byte.
int64_t checkpoint_bytes(const Config& c);

// How many checkpoints the root holds at once at most: keep_last, plus the one being
// written before the oldest is pruned. keep_last 0 (keep all): every save the schedule
// names. 0 when the run saves nothing.
int64_t checkpoints_held_at_once(const Config& c);

// Bytes free to an unprivileged writer on the file system holding `path` (or its nearest
// existing parent); nullopt when it cannot be read.
std::optional<int64_t> free_bytes(const std::string& path);

// "a checkpoint of this run needs about 4.2 MB; 1.3 MB free in ROOT": for the errors of
// a save that failed for lack of space, and the run's end after max_failed_saves.
std::string space_note(const Config& c, const std::string& root);

// At start: a warning (logged, and returned; "" when it fits or nothing is saved) when
// the checkpoint root's file system has less free space than checkpoints_held_at_once
// checkpoints need, naming both numbers.
std::string check_checkpoint_space(const Config& c);

}  // namespace troupe::engine
