// Loading: verification of sizes and checksums, fallback from a damaged newest
// checkpoint with a report naming the damage, and clear errors for bad manifests.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "ckpt/commit.h"
#include "ckpt/corrupt.h"
#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

TEST_CASE("a damaged newest checkpoint is reported and the previous complete one loads") {
  ScratchDir root;
  save_test_checkpoint(root.path(), 10, 2, 2, 0);
  const std::string newest = save_test_checkpoint(root.path(), 20, 2, 2, 0);
  const CheckpointManifest m = read_manifest(newest);
  const ShardFile& shard1 = m.shard(1);

  SUBCASE("one flipped byte in a shard's data") {
    const std::string path = corrupt_shard(newest, 1);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 10);
    CHECK(out.damage_found);
    const std::string report = joined(out.report);
    CHECK(report.find(path + ": CRC-32C 0x") != std::string::npos);
    CHECK(report.find("manifest says " + hex32(shard1.crc32c())) != std::string::npos);
    // The damaged tensor is named (corrupt_shard hits the middle piece).
    const auto& hit = shard1.piece(shard1.piece_size() / 2);
    CHECK(report.find("damaged data of " + tensor_label(hit.name(), hit.kind())) !=
          std::string::npos);
    CHECK(report.find("-> falling back to step_00000010") != std::string::npos);
  }
  SUBCASE("a truncated shard") {
    const std::string path = truncate_shard(newest, 1);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 10);
    CHECK(joined(out.report).find(path + ": size " + std::to_string(shard1.size_bytes() / 2) +
                                  " bytes, manifest says " +
                                  std::to_string(shard1.size_bytes())) != std::string::npos);
  }
  SUBCASE("a missing shard") {
    std::filesystem::remove(newest + "/" + shard1.file());
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 10);
    CHECK(joined(out.report).find(shard1.file() + ": missing") != std::string::npos);
  }
  SUBCASE("a damaged manifest") {
    flip_bytes(newest + "/manifest.pb", 30);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 10);
    CHECK(joined(out.report).find("manifest.pb: CRC-32C") != std::string::npos);
  }
  SUBCASE("damage in the footer (piece table location)") {
    flip_bytes(newest + "/" + shard1.file(), shard1.size_bytes() - 3);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 10);
    CHECK(joined(out.report).find("damage outside piece data") != std::string::npos);
  }
  SUBCASE("every checkpoint damaged: nothing loads, everything is reported") {
    corrupt_shard(newest, 0);
    corrupt_shard(root / "step_00000010", 3);
    const LoadOutcome out = load_latest(root.path());
    CHECK_FALSE(out.checkpoint);
    CHECK(out.damage_found);
    CHECK(out.report.size() == 2);
    CHECK(out.report[1].find("-> no older checkpoint to fall back to") != std::string::npos);
    CHECK_THROWS_WITH_AS(open_checkpoint_path(root.path(), nullptr),
                         doctest::Contains("no complete checkpoint"), CheckpointError);
  }
  SUBCASE("strict open of the damaged directory names the file") {
    corrupt_shard(newest, 2);
    CHECK_THROWS_WITH_AS(Checkpoint::open(newest),
                         doctest::Contains((newest + "/" + m.shard(2).file() + ": CRC-32C").c_str()),
                         CheckpointError);
    // Report mode opens it, and reads touching the damaged shard refuse.
    const Checkpoint c = Checkpoint::open(newest, Checkpoint::Verify::kReport);
    CHECK(c.damage().size() == 1);
    const auto& p = m.shard(2).piece(0);
    CHECK_THROWS_WITH_AS(c.read(p.name(), p.kind()), doctest::Contains("damaged shard"),
                         CheckpointError);
  }
}

TEST_CASE("latest: unreadable or missing") {
  ScratchDir root;
  save_test_checkpoint(root.path(), 1, 1, 1, 0);
  save_test_checkpoint(root.path(), 2, 1, 1, 0);
  SUBCASE("garbage") {
    write_file_atomically(root / "latest", "not a name\n");
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 2);
    CHECK(out.damage_found);
    CHECK(joined(out.report).find("latest: holds 'not a name'") != std::string::npos);
  }
  SUBCASE("missing") {
    std::filesystem::remove(root / "latest");
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 2);
    CHECK_FALSE(out.damage_found);
  }
  SUBCASE("names a step whose directory is gone") {
    write_file_atomically(root / "latest", "step_00000009\n");
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 2);
    CHECK(joined(out.report).find("step_00000009/manifest.pb: cannot open") != std::string::npos);
  }
  SUBCASE("an empty or absent root has nothing to load and nothing to report") {
    ScratchDir empty;
    const LoadOutcome out = load_latest(empty.path());
    CHECK_FALSE(out.checkpoint);
    CHECK(out.report.empty());
    CHECK_FALSE(load_latest(empty / "nope").checkpoint);
  }
}

TEST_CASE("bad manifests are clear errors naming the file and the field") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 4, 1, 1, 0);
  const std::string path = dir + "/manifest.pb";
  CheckpointManifest m = read_manifest(dir);
  auto rewrite = [&](const CheckpointManifest& changed) {
    write_file_atomically(path, encode_manifest(changed));
  };
  SUBCASE("wrong format version") {
    m.set_format_version(2);
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir),
                         doctest::Contains((path + ": format_version 2 not supported (this build reads 1)").c_str()),
                         CheckpointError);
  }
  SUBCASE("a shard listed but absent") {
    ShardFile ghost = m.shard(0);
    ghost.set_file("ghost.shard");
    *m.add_shard() = ghost;
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir),
                         doctest::Contains((dir + "/ghost.shard: missing (listed in the manifest)").c_str()),
                         CheckpointError);
  }
  SUBCASE("config hash does not match the text") {
    m.set_config_hash(m.config_hash() ^ 1);
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir),
                         doctest::Contains("does not match the FNV-1a of config_text"),
                         CheckpointError);
  }
  SUBCASE("a piece outside its global shape") {
    m.mutable_shard(0)->mutable_piece(0)->mutable_slice(0)->set_offset(1);
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir),
                         doctest::Contains(("piece 0: " + m.shard(0).piece(0).name() + " (param): slice").c_str()),
                         CheckpointError);
  }
  SUBCASE("two pieces of one tensor disagree on the global shape") {
    auto* p = m.mutable_shard(0)->add_piece();
    *p = m.shard(0).piece(0);
    p->set_global_shape(0, p->global_shape(0) + 1);
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir), doctest::Contains("in another piece"),
                         CheckpointError);
  }
  SUBCASE("the shard's own table differs from the manifest") {
    m.mutable_shard(0)->mutable_piece(0)->set_name("renamed.weight");
    rewrite(m);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir), doctest::Contains("own piece table differs"),
                         CheckpointError);
  }
  SUBCASE("not a manifest at all") {
    write_file_atomically(path, "hello");
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir),
                         doctest::Contains((path + ": not a troupe checkpoint manifest").c_str()),
                         CheckpointError);
  }
  SUBCASE("truncated manifest") {
    truncate_file(path, 40);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir), doctest::Contains("payload bytes, file has 16"),
                         CheckpointError);
  }
}

TEST_CASE("counters that disagree with each other or with the step are refused on resume, naming the rule") {
  ScratchDir root;
  save_test_checkpoint(root.path(), 5, 1, 1, 0);
  const std::string dir = save_test_checkpoint(root.path(), 8, 1, 1, 0);  // step 8: 7 + 1 updates, batch 8
  const std::string path = dir + "/manifest.pb";
  CheckpointManifest m = read_manifest(dir);
  REQUIRE(m.successful_updates() == 7);
  REQUIRE(m.skipped_updates() == 1);
  std::string rule;
  SUBCASE("consumed_samples 0 at step 8") {
    m.set_consumed_samples(0);
    rule = "consumed_samples 0 must be step 8 x global_batch_size 8 = 64";
  }
  SUBCASE("successful_updates 3 at step 8 with one skipped") {
    m.set_successful_updates(3);
    rule = "successful_updates 3 + skipped_updates 1 must equal step 8";
  }
  SUBCASE("the LR schedule's samples against the successful updates") {
    m.set_lr_schedule_samples(64);
    rule = "lr_schedule_samples 64 must be successful_updates 7 x global_batch_size 8 = 56";
  }
  SUBCASE("the data position against consumed_samples") {
    m.mutable_data_position()->set_consumed_samples(72);
    rule = "data_position.consumed_samples 72 must equal consumed_samples 64";
  }
  write_file_atomically(path, encode_manifest(m));  // a valid checksum over wrong counters
  CHECK_NOTHROW(Checkpoint::open(dir));              // inspect still reads it
  CHECK_THROWS_WITH_AS(open_checkpoint_path(dir, nullptr),
                       doctest::Contains((path + ": inconsistent counters: " + rule).c_str()), CheckpointError);
  // As `latest` it counts as damaged: the previous checkpoint loads, the rule reported.
  const LoadOutcome out = load_latest(root.path());
  REQUIRE(out.checkpoint);
  CHECK(out.checkpoint->step() == 5);
  CHECK(joined(out.report).find(rule) != std::string::npos);
}

TEST_CASE("latest, a manifest or a shard that is a device or a FIFO is refused, never read or waited on") {
  ScratchDir root;
  save_test_checkpoint(root.path(), 3, 1, 1, 0);
  const std::string dir = save_test_checkpoint(root.path(), 6, 1, 1, 0);
  const std::string latest = root.path() + "/latest";
  SUBCASE("latest links to /dev/zero: every step directory is tried instead") {
    std::filesystem::remove(latest);
    std::filesystem::create_symlink("/dev/zero", latest);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 6);
    CHECK(joined(out.report).find(latest + ": checkpoint file is a character device, not a regular file") !=
          std::string::npos);
  }
  SUBCASE("the newest manifest is a FIFO: it counts as damaged, the previous checkpoint loads") {
    std::filesystem::remove(dir + "/manifest.pb");
    REQUIRE(::mkfifo((dir + "/manifest.pb").c_str(), 0600) == 0);
    const LoadOutcome out = load_latest(root.path());
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() == 3);
    CHECK(joined(out.report).find("manifest.pb: checkpoint file is a FIFO, not a regular file") != std::string::npos);
  }
  SUBCASE("a shard is a FIFO") {
    const std::string shard = dir + "/" + read_manifest(dir).shard(0).file();
    std::filesystem::remove(shard);
    REQUIRE(::mkfifo(shard.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(Checkpoint::open(dir), doctest::Contains("is a FIFO, not a regular file"), CheckpointError);
  }
}
