#include "engine/storage_space.h"

#include <sys/statvfs.h>

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/derived.h"
#include "engine/checkpointing.h"
#include "engine/stage_worker.h"
#include "engine/topology.h"
#include "metrics/human_units.h"

namespace troupe::engine {
namespace {

// Each shard file's header, piece table and footer, and the manifest: well under this.
constexpr int64_t kOverheadPerShard = 64 << 10;
constexpr int kKindsWritten = 3;  // param, exp_avg, exp_avg_sq (engine/checkpointing.h)

}  // namespace

int64_t checkpoint_bytes(const Config& c) {
  const auto topo = Topology::logical(c);
  int64_t elements = 0, shards = 0;
  // Data-parallel replicas hold the same stage: replica 0's registries count each
  // (stage, tensor-parallel) part once, as the distributed shards of all replicas together
  // (or replica 0 alone, replicated) write it once.
  for (const auto& r : topo.all_ranks()) {
    if (writes_shard(c, r)) ++shards;
    if (r.dp == 0) elements += stage_registry(c, r).total();
  }
  return elements * kKindsWritten * int64_t(sizeof(float)) + (shards + 1) * kOverheadPerShard;
}

int64_t checkpoints_held_at_once(const Config& c) {
  const auto& ck = c.checkpoint();
  const int64_t steps = config::full_updates(c);
  const int64_t interval_saves = ck.interval_steps() > 0 ? steps / ck.interval_steps() : 0;
  const bool saves = interval_saves > 0 || ck.interval_seconds() > 0 || ck.save_on_exit();
  if (!saves) return 0;
  if (ck.keep_last() > 0) return ck.keep_last() + 1;
  // Keep all: every interval save and the final one; a time-based schedule at least two.
  return std::max<int64_t>(interval_saves + (ck.save_on_exit() ? 1 : 0), ck.interval_seconds() > 0 ? 2 : 1);
}

std::optional<int64_t> free_bytes(const std::string& path) {
  std::filesystem::path p = path.empty() ? std::filesystem::path(".") : std::filesystem::path(path);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  struct statvfs s {};
  if (::statvfs(p.c_str(), &s) != 0) return std::nullopt;
  return int64_t(s.f_bavail) * int64_t(s.f_frsize);
}

std::string space_note(const Config& c, const std::string& root) {
  using metrics::format_bytes;
  std::string note = fmt::format("a checkpoint of this run needs about {}", format_bytes(double(checkpoint_bytes(c))));
  if (const auto free = free_bytes(root)) note += fmt::format("; {} free in {}", format_bytes(double(*free)), root);
  return note;
}

std::string check_checkpoint_space(const Config& c) {
  const int64_t held = checkpoints_held_at_once(c);
  if (held == 0) return {};
  const auto root = checkpoint_root(c);
  const auto free = free_bytes(root);
  const int64_t one = checkpoint_bytes(c);
  if (!free || *free >= held * one) return {};
  const int keep = c.checkpoint().keep_last();
  const auto warning = fmt::format(
      "checkpoint: {} has {} free, less than the {} that {} checkpoint(s) of about {} each need at once ({}): "
      "saves will fail once the disk is full",
      root, metrics::format_bytes(double(*free)), metrics::format_bytes(double(held * one)), held,
      metrics::format_bytes(double(one)),
      keep > 0 ? fmt::format("checkpoint.keep_last {} and the one being written", keep)
               : std::string("checkpoint.keep_last 0 keeps every save"));
  spdlog::warn("{}", warning);
  return warning;
}

}  // namespace troupe::engine
