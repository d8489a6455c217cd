// Writing and reading back: shard files, manifest fields, determinism, config hash.
#include <doctest/doctest.h>

#include <google/protobuf/text_format.h>

#include <google/protobuf/util/message_differencer.h>

#include "ckpt/commit.h"
#include "ckpt/crc32c_combine.h"
#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "test/ckpt/ckpt_test_util.h"
#include "util/crc32c.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

TEST_CASE("FNV-1a 64 check values") {
  CHECK(fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("canonical config text fills defaults, so spelling out a default does not change the hash") {
  Config a, b;
  a.mutable_model()->set_layers(3);
  b.mutable_model()->set_layers(3);
  b.mutable_model()->set_heads(4);            // the default
  b.mutable_optimizer()->set_beta2(0.95);     // the default
  CHECK(canonical_config_text(a) == canonical_config_text(b));
  CHECK(canonical_config_text(a).find("heads: 4") != std::string::npos);
  CHECK(canonical_config_text(a).find("keep_last: 3") != std::string::npos);
  // An unset model.norm_eps (meaning layernorm_eps) is written as the epsilon the run used,
  // never as the 0 that filling in every field would give it; a set one stays as set.
  {
    Config unset = a;
    unset.mutable_model()->clear_norm_eps();
    unset.mutable_model()->set_layernorm_eps(2e-5f);
    Config back;
    REQUIRE(google::protobuf::TextFormat::ParseFromString(canonical_config_text(unset), &back));
    CHECK(back.model().has_norm_eps());
    CHECK(back.model().norm_eps() == 2e-5f);
    Config set = unset;
    set.mutable_model()->set_norm_eps(1e-6f);
    REQUIRE(google::protobuf::TextFormat::ParseFromString(canonical_config_text(set), &back));
    CHECK(back.model().norm_eps() == 1e-6f);
  }
  Config c = a;
  c.mutable_model()->set_width(96);
  CHECK(fnv1a64(canonical_config_text(a)) != fnv1a64(canonical_config_text(c)));

  CheckpointManifest m;
  set_manifest_config(m, a);
  CHECK(m.config_hash() == fnv1a64(m.config_text()));
  const Config back = manifest_config(m, "m");
  CHECK(back.model().layers() == 3);
  CHECK(canonical_config_text(back) == m.config_text());
}

TEST_CASE("a DP2 x PP2 checkpoint round-trips every tensor and every manifest field") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 12, 2, 2, 0);
  CHECK(dir == root / "step_00000012");
  CHECK(dir_entries(root.path()) == std::vector<std::string>{"latest", "step_00000012"});
  CHECK(file_bytes(root / "latest") == "step_00000012\n");
  CHECK(dir_entries(dir) == std::vector<std::string>{"dp0_pp0.shard", "dp0_pp1.shard",
                                                     "dp1_pp0.shard", "dp1_pp1.shard",
                                                     "manifest.pb"});

  const Checkpoint c = Checkpoint::open(dir);
  CHECK_FALSE(c.damaged());
  CheckpointManifest expected = test_manifest(12, 2, 2);
  CheckpointManifest got = c.manifest();
  CHECK(got.format_version() == 1u);
  CHECK(got.shard_size() == 4);
  CHECK(got.shard(0).writer() == "ckpt_writer/dp0/pp0/tp0");
  got.clear_shard();
  got.clear_format_version();
  CHECK(google::protobuf::util::MessageDifferencer::Equals(got, expected));

  // Every (name, kind) of the model, whole and bitwise.
  const auto tensors = c.tensors();
  CHECK(tensors.size() == small_gpt2_tensors().size() * 4);
  for (const auto& t : small_gpt2_tensors())
    for (TensorKind k : {TensorPiece::PARAM, TensorPiece::MASTER, TensorPiece::EXP_AVG,
                         TensorPiece::EXP_AVG_SQ}) {
      CAPTURE(t.name);
      CAPTURE(kind_name(k));
      REQUIRE(c.has(t.name, k));
      CHECK(c.shape(t.name, k) == t.shape);
      CHECK(bitwise_equal(c.read(t.name, k),
                          expected_region(t.name, k, t.shape, Region::whole(t.shape))));
    }
  // The tied embedding is stored twice (first and last stage) and read once.
  for (const auto& t : tensors)
    if (t.name == "wte.weight") CHECK(t.stored_elements == 2 * 24 * 8);
}

TEST_CASE("the same state written twice gives bitwise identical files") {
  ScratchDir a, b;
  save_test_checkpoint(a.path(), 3, 2, 2, 0);
  save_test_checkpoint(b.path(), 3, 2, 2, 0);
  for (const auto& name : dir_entries(a / "step_00000003")) {
    CAPTURE(name);
    CHECK(file_bytes(a / ("step_00000003/" + name)) == file_bytes(b / ("step_00000003/" + name)));
  }
}

TEST_CASE("shard writer rejects bad pieces with the tensor named") {
  ScratchDir dir;
  ShardWriter w(dir.path(), "x.shard");
  const std::vector<float> four(4, 1.0f);
  CHECK_THROWS_WITH_AS(w.add(PieceSpec::whole("a", TensorPiece::PARAM, {2, 3}), four),
                       doctest::Contains("a (param): 4 values given for a region of 6"),
                       CheckpointError);
  PieceSpec out_of_range{"b", TensorPiece::MASTER, {4, 4}, Region{{{2, 3}, {0, 4}}, 0, 4}};
  CHECK_THROWS_WITH_AS(w.add(out_of_range, four), doctest::Contains("b (master)"), CheckpointError);
  PieceSpec empty_range{"c", TensorPiece::PARAM, {4}, Region{{{0, 4}}, 2, 2}};
  CHECK_THROWS_WITH_AS(w.add(empty_range, {}), doctest::Contains("flat range [2, 2)"),
                       CheckpointError);
  CHECK_THROWS_AS(ShardWriter(dir.path(), "../evil"), CheckpointError);
  CHECK_THROWS_AS(ShardWriter(dir.path(), "manifest.pb"), CheckpointError);
}

TEST_CASE("reading a tensor the checkpoint lacks names it") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 1, 1, 1, 0);
  const Checkpoint c = Checkpoint::open(dir);
  CHECK_THROWS_WITH_AS(c.read("h.7.ln_1.weight", TensorPiece::PARAM),
                       doctest::Contains("no tensor h.7.ln_1.weight (param)"), CheckpointError);
  CHECK_THROWS_WITH_AS(c.read("wpe.weight", TensorPiece::PARAM, Region{{{0, 7}, {0, 8}}, 0, 56}),
                       doctest::Contains("outside global shape [6, 8]"), CheckpointError);
}

TEST_CASE("CRC-32C of a concatenation from the parts' CRCs") {
  std::string s(5000, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char((i * 131 + 7) ^ (i >> 3));
  const uint32_t whole = util::crc32c(s.data(), s.size());
  for (size_t cut : {0, 1, 3, 8, 63, 64, 1000, 4999, 5000}) {
    CAPTURE(cut);
    const uint32_t a = util::crc32c(s.data(), cut), b = util::crc32c(s.data() + cut, s.size() - cut);
    CHECK(crc32c_combine(a, b, s.size() - cut) == whole);
  }
  // The shard writer's file CRC (built by combining) equals a plain CRC of the file.
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 1, 2, 2, 0);
  const CheckpointManifest manifest = read_manifest(dir);
  for (const auto& shard : manifest.shard()) {
    const std::string bytes = file_bytes(dir + "/" + shard.file());
    CHECK(util::crc32c(bytes.data(), bytes.size()) == shard.crc32c());
  }
}
