// The commit protocol: a crash at every point leaves the old or the new checkpoint
// complete; keep-last-K; leftovers are cleaned up; committed steps are not rewritten.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/reader.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

constexpr int kCrashedStatus = 42;

// Runs save_test_checkpoint(root, step, DP2 x PP1, keep_last) in a child process
// that dies (_exit, no cleanup of any kind) right after the `occurrence`-th time
// the protocol reaches `point`. Returns true when the child died there.
bool crash_during_save(const std::string& root, int64_t step, int keep_last, CommitPoint point,
                       int occurrence) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int seen = 0;
    try {
      save_test_checkpoint(root, step, 2, 1, keep_last, [&](CommitPoint p) {
        if (p == point && ++seen == occurrence) ::_exit(kCrashedStatus);
      });
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == kCrashedStatus;
}

bool has_entry_ending(const std::string& dir, const std::string& suffix) {
  for (const auto& e : dir_entries(dir))
    if (e.size() >= suffix.size() && e.compare(e.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

}  // namespace

TEST_CASE("step directory names") {
  CHECK(step_dir_name(42) == "step_00000042");
  CHECK(step_dir_name(123456789) == "step_123456789");
  CHECK(parse_step_dir_name("step_00000042") == 42);
  CHECK(parse_step_dir_name("step_123456789") == 123456789);
  CHECK_FALSE(parse_step_dir_name("step_0042"));
  CHECK_FALSE(parse_step_dir_name("step_00000042.partial"));
  CHECK_FALSE(parse_step_dir_name("step_0000004x"));
}

TEST_CASE("a crash at every point of the commit leaves the old or the new checkpoint complete") {
  for (CommitPoint point : kAllCommitPoints) {
    // Shards are written twice per save (DP2): crash at the first and at the second.
    const bool per_shard =
        point == CommitPoint::kShardTempWritten || point == CommitPoint::kShardRenamed;
    for (int occurrence = 1; occurrence <= (per_shard ? 2 : 1); ++occurrence) {
      CAPTURE(commit_point_name(point));
      CAPTURE(occurrence);
      const bool committed = point >= CommitPoint::kLatestRenamed;

      ScratchDir root;
      save_test_checkpoint(root.path(), 5, 2, 1, 2);
      save_test_checkpoint(root.path(), 10, 2, 1, 2);
      // A stale .partial of an earlier crashed attempt, which pruning must remove.
      std::filesystem::create_directories(root / "step_00000007.partial");
      REQUIRE(crash_during_save(root.path(), 20, 2, point, occurrence));

      LoadOutcome loaded = load_latest(root.path());
      REQUIRE(loaded.checkpoint);
      CHECK_FALSE(loaded.damage_found);
      CHECK(loaded.checkpoint->step() == (committed ? 20 : 10));
      CHECK_FALSE(loaded.checkpoint->damaged());
      // The loaded checkpoint is whole: every tensor assembles.
      for (const auto& t : loaded.checkpoint->tensors())
        CHECK_NOTHROW(loaded.checkpoint->read(t.name, t.kind));

      // Saving again after the crash succeeds (unless step 20 is already committed)
      // and leaves a clean root.
      if (!committed) {
        save_test_checkpoint(root.path(), 20, 2, 1, 2);
      } else {
        CHECK_THROWS_WITH_AS(CheckpointCommit::begin(root.path(), 20),
                             doctest::Contains("is the latest complete checkpoint"),
                             CheckpointError);
        save_test_checkpoint(root.path(), 25, 2, 1, 2);
      }
      const int64_t newest = committed ? 25 : 20;
      const std::vector<std::string> want = {"latest", step_dir_name(committed ? 20 : 10),
                                             step_dir_name(newest)};
      CHECK(dir_entries(root.path()) == want);
      LoadOutcome again = load_latest(root.path());
      REQUIRE(again.checkpoint);
      CHECK(again.checkpoint->step() == newest);
      CHECK(again.report.empty());
    }
  }
}

TEST_CASE("a crash during the very first checkpoint leaves none or the new one") {
  for (CommitPoint point : kAllCommitPoints) {
    if (point == CommitPoint::kOldCheckpointRemoved) continue;  // nothing to remove
    CAPTURE(commit_point_name(point));
    ScratchDir root;
    REQUIRE(crash_during_save(root.path(), 3, 0, point, 1));
    LoadOutcome loaded = load_latest(root.path());
    CHECK_FALSE(loaded.damage_found);
    if (point < CommitPoint::kStepDirRenamed) {
      CHECK_FALSE(loaded.checkpoint);
    } else {
      // The directory is complete before `latest` exists; without `latest` the
      // loader takes the newest step directory that verifies, and says so.
      REQUIRE(loaded.checkpoint);
      CHECK(loaded.checkpoint->step() == 3);
      if (point < CommitPoint::kLatestRenamed) {
        REQUIRE(loaded.report.size() == 1);
        CHECK(loaded.report[0].find("latest: missing") != std::string::npos);
      }
    }
  }
}

TEST_CASE("keep the last K complete checkpoints") {
  ScratchDir root;
  for (int64_t step = 1; step <= 5; ++step) save_test_checkpoint(root.path(), step, 1, 1, 2);
  CHECK(dir_entries(root.path()) ==
        std::vector<std::string>{"latest", "step_00000004", "step_00000005"});
  save_test_checkpoint(root.path(), 6, 1, 1, 1);
  CHECK(dir_entries(root.path()) == std::vector<std::string>{"latest", "step_00000006"});

  ScratchDir all;
  for (int64_t step = 1; step <= 4; ++step) save_test_checkpoint(all.path(), step, 1, 1, 0);
  CHECK(list_step_dirs(all.path()) == std::vector<int64_t>{1, 2, 3, 4});
}

TEST_CASE("resuming from an earlier checkpoint abandons the newer ones at the next commit") {
  ScratchDir root;
  for (int64_t step : {2, 4, 6}) save_test_checkpoint(root.path(), step, 1, 1, 0);
  // The run resumed from step 2 and saves step 4 again: the old step 4 is replaced,
  // and step 6 (a timeline that no longer exists) is removed.
  save_test_checkpoint(root.path(), 4, 2, 1, 0);
  CHECK(list_step_dirs(root.path()) == std::vector<int64_t>{2, 4});
  CHECK(read_latest(root.path()) == 4);
  CHECK(Checkpoint::open(root / "step_00000004").manifest().topology().data() == 2);
  CHECK_FALSE(has_entry_ending(root.path(), ".deleting"));
}

TEST_CASE("commit refuses a manifest that does not match the shards on disk") {
  ScratchDir root;
  auto commit = CheckpointCommit::begin(root.path(), 1);
  ShardWriter w(commit.partial_dir(), "a.shard");
  add_test_piece(w, PieceSpec::whole("ln_f.bias", TensorPiece::PARAM, {8}));
  CheckpointManifest m = test_manifest(1, 1, 1);
  ShardFile record = w.finish();
  SUBCASE("a listed shard is missing") {
    ShardFile ghost = record;
    ghost.set_file("ghost.shard");
    *m.add_shard() = record;
    *m.add_shard() = ghost;
    CHECK_THROWS_WITH_AS(commit.commit(m, 0),
                         doctest::Contains("ghost.shard: shard listed in the manifest is missing"),
                         CheckpointError);
  }
  SUBCASE("a size differs") {
    record.set_size_bytes(record.size_bytes() + 64);
    *m.add_shard() = record;
    CHECK_THROWS_WITH_AS(commit.commit(m, 0), doctest::Contains("a.shard: "), CheckpointError);
  }
  SUBCASE("the step differs") {
    *m.add_shard() = record;
    m.set_step(2);
    CHECK_THROWS_WITH_AS(commit.commit(m, 0), doctest::Contains("manifest step 2"),
                         CheckpointError);
  }
  // Nothing was committed.
  CHECK_FALSE(read_latest(root.path()));
  CHECK(list_step_dirs(root.path()).empty());
}

TEST_CASE("a stale partial directory of the same step is set aside in one rename, and its leftovers pruned") {
  ScratchDir root;
  save_test_checkpoint(root.path(), 1, 1, 1, 0);
  // An attempt at step 2 that was given up while a late writer still wrote into it.
  auto first = CheckpointCommit::begin(root.path(), 2);
  const std::string partial = first.partial_dir();
  const std::string late = partial + "/dp0_pp0_tp0.shard.tmp";
  { std::ofstream(late) << "late writer"; }
  // The next attempt at step 2 makes its directory anew: the late writer's file went
  // with the old one, and nothing is left aside.
  auto second = CheckpointCommit::begin(root.path(), 2);
  CHECK(second.partial_dir() == partial);
  CHECK(dir_entries(partial).empty());
  CHECK_FALSE(std::filesystem::exists(late));
  CHECK_FALSE(has_entry_ending(root.path(), ".deleting"));
  // A crash between the rename and the removal leaves step_N.partial.deleting: the
  // next commit's prune removes it with the other leftovers.
  std::filesystem::create_directory(root / "step_00000003.partial.deleting");
  prune_checkpoints(root.path(), 1, 0, {});
  CHECK(dir_entries(root.path()) == std::vector<std::string>{"latest", "step_00000001"});
}
