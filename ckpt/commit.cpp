#include "ckpt/commit.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/manifest.h"

namespace fs = std::filesystem;

namespace troupe::ckpt {
namespace {

constexpr std::string_view kPartialSuffix = ".partial";
constexpr std::string_view kDeletingSuffix = ".deleting";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Renames DIR to DIR.deleting, makes that durable, then removes it.
void remove_checkpoint_dir(const std::string& root, const std::string& name,
                           const CommitHook& hook) {
  std::string doomed = root + "/" + name;
  if (!ends_with(name, kDeletingSuffix)) {
    const std::string aside = doomed + std::string(kDeletingSuffix);
    remove_tree(aside);
    rename_path(doomed, aside);
    fsync_dir(root);
    doomed = aside;
  }
  remove_tree(doomed);
  if (hook) hook(CommitPoint::kOldCheckpointRemoved);
}

void call(const CommitHook& hook, CommitPoint p) {
  if (hook) hook(p);
}

}  // namespace

const char* commit_point_name(CommitPoint point) {
  switch (point) {
    case CommitPoint::kPartialDirCreated: return "partial-dir-created";
    case CommitPoint::kShardTempWritten: return "shard-temp-written";
    case CommitPoint::kShardRenamed: return "shard-renamed";
    case CommitPoint::kManifestTempWritten: return "manifest-temp-written";
    case CommitPoint::kManifestRenamed: return "manifest-renamed";
    case CommitPoint::kPartialDirSynced: return "partial-dir-synced";
    case CommitPoint::kStepDirRenamed: return "step-dir-renamed";
    case CommitPoint::kRootSynced: return "root-synced";
    case CommitPoint::kLatestTempWritten: return "latest-temp-written";
    case CommitPoint::kLatestRenamed: return "latest-renamed";
    case CommitPoint::kLatestSynced: return "latest-synced";
    case CommitPoint::kOldCheckpointRemoved: return "old-checkpoint-removed";
  }
  return "unknown";
}

std::string step_dir_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() < prefix.size() + 8 || name.size() > prefix.size() + 18 ||
      name.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<int64_t> list_step_dirs(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return steps;
    throw CheckpointError(root + ": cannot list: " + ec.message());
  }
  for (const auto& entry : it) {
    auto step = parse_step_dir_name(entry.path().filename().string());
    if (step && entry.is_directory()) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> read_latest(const std::string& root) {
  const std::string path = root + "/" + std::string(kLatestFile);
  if (!exists(path)) return std::nullopt;
  std::string text = read_file(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  auto step = parse_step_dir_name(text);
  if (!step)
    throw CheckpointError(path + ": holds '" + text.substr(0, 64) +
                          "', not a checkpoint directory name (step_NNNNNNNN)");
  return step;
}

CheckpointCommit::CheckpointCommit(std::string root, int64_t step, CommitHook hook)
    : root_(std::move(root)), step_(step), hook_(std::move(hook)) {
  partial_dir_ = root_ + "/" + step_dir_name(step_) + std::string(kPartialSuffix);
}

CheckpointCommit CheckpointCommit::begin(std::string root, int64_t step, CommitHook hook) {
  if (step < 0) throw CheckpointError(root + ": checkpoint step " + std::to_string(step) + " < 0");
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError(root + ": cannot create checkpoint root: " + ec.message());
  std::optional<int64_t> latest;
  try {
    latest = read_latest(root);
  } catch (const CheckpointError&) {
    // A damaged `latest` is replaced by this commit; loading reports it.
  }
  if (latest && *latest == step)
    throw CheckpointError(root + "/" + step_dir_name(step) +
                          " is the latest complete checkpoint; refusing to rewrite it");
  CheckpointCommit c(std::move(root), step, std::move(hook));
  // One left by an earlier attempt (a crash, or a save given up while a late writer may
  // still be writing into it): moved aside in one rename, then removed, so that such a
  // writer finds its directory gone or made anew (actors/writer_actor.cpp), never
  // half-emptied under the same identity.
  if (exists(c.partial_dir_))
    remove_checkpoint_dir(c.root_, step_dir_name(step) + std::string(kPartialSuffix), CommitHook{});
  make_dir(c.partial_dir_);
  call(c.hook_, CommitPoint::kPartialDirCreated);
  return c;
}

std::string CheckpointCommit::commit(CheckpointManifest manifest, int keep_last) {
  const std::string final_dir = root_ + "/" + step_dir_name(step_);
  if (manifest.step() != step_)
    throw CheckpointError(partial_dir_ + ": manifest step " + std::to_string(manifest.step()) +
                          " differs from the checkpoint's step " + std::to_string(step_));
  manifest.set_format_version(kFormatVersion);
  std::sort(manifest.mutable_shard()->begin(), manifest.mutable_shard()->end(),
            [](const ShardFile& a, const ShardFile& b) { return a.file() < b.file(); });
  const std::string manifest_path = partial_dir_ + "/" + std::string(kManifestFile);
  check_manifest(manifest, manifest_path);
  for (const auto& shard : manifest.shard()) {
    const std::string path = partial_dir_ + "/" + shard.file();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw CheckpointError(path + ": shard listed in the manifest is missing: " +
                                  ec.message());
    if (size != shard.size_bytes())
      throw CheckpointError(path + ": " + std::to_string(size) + " bytes, manifest records " +
                            std::to_string(shard.size_bytes()));
  }

  // 3. The manifest, durable, then the directory entries of shards and manifest.
  {
    OutputFile out(manifest_path + ".tmp");
    const std::string bytes = encode_manifest(manifest);
    out.write(bytes.data(), bytes.size());
    out.sync();
    out.close();
  }
  call(hook_, CommitPoint::kManifestTempWritten);
  rename_path(manifest_path + ".tmp", manifest_path);
  call(hook_, CommitPoint::kManifestRenamed);
  fsync_dir(partial_dir_);
  call(hook_, CommitPoint::kPartialDirSynced);

  // 4. The complete directory takes its final name.
  if (exists(final_dir)) {
    // Not `latest` (begin() checked): left by a crash before `latest` moved, or by
    // a run that was resumed from an earlier checkpoint. Move it out of the way.
    const std::string aside = final_dir + std::string(kDeletingSuffix);
    remove_tree(aside);
    rename_path(final_dir, aside);
  }
  rename_path(partial_dir_, final_dir);
  call(hook_, CommitPoint::kStepDirRenamed);
  fsync_dir(root_);
  call(hook_, CommitPoint::kRootSynced);

  // 5. Commit: `latest` names the new directory.
  const std::string latest = root_ + "/" + std::string(kLatestFile);
  {
    OutputFile out(latest + ".tmp");
    const std::string text = step_dir_name(step_) + "\n";
    out.write(text.data(), text.size());
    out.sync();
    out.close();
  }
  call(hook_, CommitPoint::kLatestTempWritten);
  rename_path(latest + ".tmp", latest);
  call(hook_, CommitPoint::kLatestRenamed);
  fsync_dir(root_);
  call(hook_, CommitPoint::kLatestSynced);

  // 6. Old checkpoints and leftovers.
  prune_checkpoints(root_, step_, keep_last, hook_);
  return final_dir;
}

void CheckpointCommit::discard() {
  const std::string name = partial_dir_.substr(root_.size() + 1);
  if (exists(partial_dir_)) remove_checkpoint_dir(root_, name, hook_);
}

void prune_checkpoints(const std::string& root, int64_t latest_step, int keep_last,
                       const CommitHook& hook) {
  std::vector<std::string> leftovers;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) throw CheckpointError(root + ": cannot list: " + ec.message());
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (ends_with(name, kPartialSuffix) || ends_with(name, kDeletingSuffix)) {
      // step_N.partial, step_N.deleting, step_N.partial.deleting (begin() set it aside)
      if (parse_step_dir_name(name.substr(0, name.find('.')))) leftovers.push_back(name);
    }
  }
  std::sort(leftovers.begin(), leftovers.end());
  for (const auto& name : leftovers) remove_checkpoint_dir(root, name, hook);
  if (exists(root + "/" + std::string(kLatestFile) + ".tmp"))
    remove_tree(root + "/" + std::string(kLatestFile) + ".tmp");

  // Keep the newest keep_last steps <= latest_step; steps past it belong to a
  // timeline that was abandoned (a crash before `latest` moved, or an earlier resume).
  std::vector<int64_t> steps = list_step_dirs(root);
  std::vector<int64_t> doomed;
  int64_t kept = 0;
  for (auto s = steps.rbegin(); s != steps.rend(); ++s) {
    if (*s > latest_step)
      doomed.push_back(*s);
    else if (keep_last > 0 && ++kept > keep_last)
      doomed.push_back(*s);
  }
  for (int64_t s : doomed) remove_checkpoint_dir(root, step_dir_name(s), hook);
}

}  // namespace troupe::ckpt
