// `supervisor inspect` as a library call: prints the manifest, verifies, and
// returns non-zero naming the damage.
#include <doctest/doctest.h>

#include <sstream>

#include "ckpt/commit.h"
#include "ckpt/corrupt.h"
#include "ckpt/inspect.h"
#include "ckpt/manifest.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

struct Run {
  int status;
  std::string out, err;
};

Run inspect(const std::string& path, InspectOptions options = {}) {
  std::ostringstream out, err;
  const int status = inspect_checkpoint(path, out, err, options);
  return {status, out.str(), err.str()};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("inspect prints the manifest of an intact checkpoint and exits 0") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 12, 2, 2, 0);
  const CheckpointManifest m = read_manifest(dir);
  for (const std::string& path : {dir, root.path()}) {
    CAPTURE(path);
    const Run r = inspect(path, {.show_config = true});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(contains(r.out, "step                12\n"));
    CHECK(contains(r.out, "consumed samples    96\n"));
    CHECK(contains(r.out, "updates             10 successful, 2 skipped\n"));
    CHECK(contains(r.out, "LR schedule at      80 samples"));
    CHECK(contains(r.out, "data position       96 samples consumed, epoch 1\n"));
    CHECK(contains(r.out, "topology            data 2 x pipeline 2 x tensor 1\n"));
    char hash[40];
    std::snprintf(hash, sizeof hash, "0x%016llx", static_cast<unsigned long long>(m.config_hash()));
    CHECK(contains(r.out, std::string("config hash         ") + hash));
    CHECK(contains(r.out, "    init                        8 bytes  0102030405060708\n"));
    CHECK(contains(r.out, "shards (4, "));
    char crc[16];
    std::snprintf(crc, sizeof crc, "0x%08x", m.shard(3).crc32c());
    CHECK(contains(r.out, "dp1_pp1.shard"));
    CHECK(contains(r.out, crc));
    CHECK(contains(r.out, "h.1.attn.c_attn.weight           exp_avg    [8, 24]"));
    CHECK(contains(r.out, "verified: 4 shards"));
    CHECK(contains(r.out, "config:\nmodel {\n"));
  }
  CHECK(contains(inspect(root.path()).out, "latest -> step_00000012"));
}

TEST_CASE("inspect exits non-zero naming a truncated or flipped shard") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 3, 2, 1, 0);
  SUBCASE("truncated") {
    const std::string path = truncate_shard(dir, 0);
    const Run r = inspect(root.path());
    CHECK(r.status == 1);
    CHECK(contains(r.err, path + ": size "));
    CHECK(contains(r.err, "DAMAGED (1 shard(s), 0 tensor(s))"));
    CHECK(contains(r.out, "DAMAGED"));
    CHECK(contains(r.out, "in a damaged shard"));
  }
  SUBCASE("flipped") {
    const std::string path = corrupt_shard(dir, 1);
    const Run r = inspect(dir);
    CHECK(r.status == 1);
    CHECK(contains(r.err, path + ": CRC-32C 0x"));
  }
  SUBCASE("missing manifest") {
    std::filesystem::remove(dir + "/manifest.pb");
    const Run r = inspect(root.path());
    CHECK(r.status == 1);
    CHECK(contains(r.err, "manifest.pb: cannot open"));
  }
  SUBCASE("not a checkpoint") {
    const Run r = inspect(root / "nothing");
    CHECK(r.status == 1);
    CHECK(contains(r.err, "neither a checkpoint directory"));
  }
}

TEST_CASE("inspect reports a tensor with a hole even when every checksum matches") {
  ScratchDir root;
  auto commit = CheckpointCommit::begin(root.path(), 1);
  ShardWriter w(commit.partial_dir(), "only.shard");
  PieceSpec half{"ln_f.weight", TensorPiece::PARAM, {8}, Region{{{0, 8}}, 0, 5}};
  add_test_piece(w, half);
  CheckpointManifest m = test_manifest(1, 1, 1);
  *m.add_shard() = w.finish();
  commit.commit(m, 0);
  const Run r = inspect(root.path());
  CHECK(r.status == 1);
  CHECK(contains(r.err, "ln_f.weight (param): 3 of 8 elements"));
  CHECK(contains(r.err, "DAMAGED (0 shard(s), 1 tensor(s))"));
  CHECK(inspect(root.path(), {.show_config = false, .assemble = false}).status == 0);
}
