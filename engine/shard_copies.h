// The newest shard each checkpoint writer of this process wrote, kept in memory as the
// state it was written from: when a committed checkpoint's shard file is damaged on disk
// afterwards (a bad sector, a stray write, the corrupt_shard fault), the next start of
// the training group rewrites the file from this copy instead of falling back to an
// older checkpoint (engine::ResumeSource::heal_from). The rewritten file must match the
// manifest's size and CRC-32C exactly, or the copy is not used.
//
// One copy per shard file name (one per writer): a writer's newer shard replaces its
// older one, so the copies cost one checkpoint's state (parameters and both Adam
// moments, 12 bytes a parameter) in the process that runs the writers. In cluster mode
// the writers run on the workers and the supervisor holds no copies (docs/checkpoints.md).
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/checkpointing.h"

namespace troupe::engine {

class ShardCopies {
 public:
  struct Copy {
    int64_t step = 0;
    std::string writer;  // the writer's path, as the file names it
    std::shared_ptr<const ShardState> state;
    ShardFile record;  // what the writer's write produced: size and CRC-32C
    std::shared_ptr<const ckpt::FlatLayout> layout;  // the writer's: how `state` is written again
  };

  // The shard `file` of checkpoint `step`, just written from `state`.
  void keep(const std::string& file, Copy copy);
  // The copy of `file` of checkpoint `step`, if the newest one kept is that step's.
  std::optional<Copy> find(int64_t step, const std::string& file) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Copy> by_file_;
};

}  // namespace troupe::engine
