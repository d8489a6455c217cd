// Resharding at the library level: pieces written under one layout, read back whole
// and as the pieces of other layouts, bitwise; replicated pieces; holes.
#include <doctest/doctest.h>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

// A single-shard checkpoint holding exactly `pieces` (test values), committed at step 1.
std::string write_pieces(const std::string& root, const std::vector<PieceSpec>& pieces,
                         const std::vector<std::vector<PieceSpec>>& more_shards = {}) {
  auto commit = CheckpointCommit::begin(root, 1);
  CheckpointManifest m;
  set_manifest_config(m, Config());
  m.set_step(1);
  std::vector<std::vector<PieceSpec>> shards = {pieces};
  shards.insert(shards.end(), more_shards.begin(), more_shards.end());
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = "shard" + std::to_string(s);  // (GCC 12 -Wrestrict false positive with "s" + ...)
    ShardWriter w(commit.partial_dir(), file);
    for (const auto& p : shards[s]) add_test_piece(w, p);
    *m.add_shard() = w.finish();
  }
  return commit.commit(m, 0);
}

// Checks that reading `region` of every tensor gives the expected values bitwise.
void check_regions(const Checkpoint& c, const std::vector<PieceSpec>& wanted) {
  for (const auto& w : wanted) {
    CAPTURE(w.name);
    CAPTURE(region_string(w.region));
    CHECK(bitwise_equal(c.read(w.name, w.kind, w.region),
                        expected_region(w.name, w.kind, w.global_shape, w.region)));
  }
}

// Megatron tensor parallelism over `tp` ranks for rank `r`: c_attn and c_fc are
// column-parallel (columns cut, and their bias), c_proj row-parallel (rows cut),
// wte vocab-parallel (rows cut); LayerNorms, wpe and row-parallel biases replicated.
Region tp_region(const NamedShape& t, int tp, int r) {
  Region whole = Region::whole(t.shape);
  auto cut = [&](size_t dim) {
    Region x = whole;
    const int64_t n = t.shape[dim] / tp;
    x.box[dim] = {n * r, n};
    x.flat_end = box_elements(x.box);
    return x;
  };
  const auto has = [&](const char* s) { return t.name.find(s) != std::string::npos; };
  if (has("c_attn.weight") || has("c_fc.weight")) return cut(1);
  if (has("c_attn.bias") || has("c_fc.bias")) return cut(0);
  if (has("c_proj.weight") || t.name == "wte.weight") return cut(0);
  return whole;
}

}  // namespace

TEST_CASE("DP2 x PP2 flat optimizer shards read back as DP1 x PP1, DP4 x PP1 and DP1 x PP2") {
  ScratchDir root;
  const std::string dir = save_test_checkpoint(root.path(), 5, 2, 2, 0);
  const Checkpoint c = Checkpoint::open(dir);
  const auto all = small_gpt2_tensors();
  for (TensorKind k : {TensorPiece::MASTER, TensorPiece::EXP_AVG, TensorPiece::EXP_AVG_SQ}) {
    // DP1 x PP1: one rank holds everything, whole.
    check_regions(c, flat_shard_pieces(all, k, 1, 0));
    // DP4 x PP1: flat shards of the one-stage buffer, cut at other places.
    for (int r = 0; r < 4; ++r) check_regions(c, flat_shard_pieces(all, k, 4, r));
    // DP3 x PP2: odd cuts of each stage's buffer (tied wte included on the last).
    for (int p = 0; p < 2; ++p)
      for (int r = 0; r < 3; ++r) check_regions(c, flat_shard_pieces(stage_tensors(p, 2), k, 3, r));
  }
}

TEST_CASE("TP2 column and row slices written, read whole and as DP-flat and TP4 pieces") {
  ScratchDir root;
  const auto all = small_gpt2_tensors();
  // Two TP ranks, each writing its slice of every tensor (replicated ones in full).
  std::vector<PieceSpec> rank0, rank1;
  for (const auto& t : all) {
    rank0.push_back({t.name, TensorPiece::PARAM, t.shape, tp_region(t, 2, 0)});
    rank1.push_back({t.name, TensorPiece::PARAM, t.shape, tp_region(t, 2, 1)});
  }
  // The distributed optimizer then cuts each TP rank's local flat buffer across DP2.
  for (int r = 0; r < 2; ++r)
    for (const auto& t : all) {
      Region local = tp_region(t, 2, r);
      const int64_t n = local.elements(), half = n / 2;
      for (int d = 0; d < 2; ++d) {
        Region piece = local;
        piece.flat_begin = d == 0 ? 0 : half;
        piece.flat_end = d == 0 ? half : n;
        (r == 0 ? rank0 : rank1).push_back({t.name, TensorPiece::EXP_AVG, t.shape, piece});
      }
    }
  const std::string dir = write_pieces(root.path(), rank0, {rank1});
  const Checkpoint c = Checkpoint::open(dir);
  for (TensorKind k : {TensorPiece::PARAM, TensorPiece::EXP_AVG}) {
    // Whole tensors (no TP).
    check_regions(c, flat_shard_pieces(all, k, 1, 0));
    // DP2 flat shards of an unsharded model.
    check_regions(c, flat_shard_pieces(all, k, 2, 1));
    // TP4 slices, and TP4 slices cut by a DP3 distributed optimizer.
    for (int r = 0; r < 4; ++r)
      for (const auto& t : all) {
        const Region local = tp_region(t, 4, r);
        check_regions(c, {{t.name, k, t.shape, local}});
        const int64_t n = local.elements();
        for (int d = 0; d < 3; ++d) {
          Region cut = local;
          cut.flat_begin = n * d / 3;
          cut.flat_end = n * (d + 1) / 3;
          check_regions(c, {{t.name, k, t.shape, cut}});
        }
      }
  }
  // A TP2 column block read as TP1 rows: box of rows 2..5 of c_attn, all columns.
  const NamedShape qkv = all[4];
  REQUIRE(qkv.name == "h.0.attn.c_attn.weight");
  check_regions(c, {{qkv.name, TensorPiece::PARAM, qkv.shape, Region::of_box({{2, 3}, {0, 24}})}});
}

TEST_CASE("replicated pieces: identical copies are accepted, differing ones are damage") {
  const Shape shape{6, 4};
  const auto whole = PieceSpec::whole("wte.weight", TensorPiece::PARAM, shape);
  SUBCASE("identical copies in two shards and overlapping flat ranges") {
    ScratchDir root;
    PieceSpec overlap = whole;
    overlap.region.flat_begin = 5;
    overlap.region.flat_end = 19;
    const Checkpoint c = Checkpoint::open(write_pieces(root.path(), {whole, overlap}, {{whole}}));
    CHECK(bitwise_equal(c.read("wte.weight", TensorPiece::PARAM),
                        expected_region("wte.weight", TensorPiece::PARAM, shape, whole.region)));
  }
  SUBCASE("a copy that differs in one element") {
    ScratchDir root;
    auto commit = CheckpointCommit::begin(root.path(), 1);
    CheckpointManifest m;
    set_manifest_config(m, Config());
    m.set_step(1);
    for (int s = 0; s < 2; ++s) {
      ShardWriter w(commit.partial_dir(), "stage" + std::to_string(s) + ".shard");
      auto data = expected_region("wte.weight", TensorPiece::PARAM, shape, whole.region);
      if (s == 1) data[4 * 3 + 2] += 1e-6f;  // element [3, 2]
      w.add(whole, data);
      *m.add_shard() = w.finish();
    }
    const Checkpoint c = Checkpoint::open(commit.commit(m, 0));
    CHECK_THROWS_WITH_AS(
        c.read("wte.weight", TensorPiece::PARAM),
        doctest::Contains("wte.weight (param): replicated copies differ at element [3, 2]"),
        CheckpointError);
    CHECK_THROWS_WITH_AS(c.read("wte.weight", TensorPiece::PARAM),
                         doctest::Contains(("stage1.shard vs " + root.path() +
                                           "/step_00000001/stage0.shard").c_str()),
                         CheckpointError);
    // A region that avoids the differing element still reads.
    CHECK_NOTHROW(c.read("wte.weight", TensorPiece::PARAM, Region::of_box({{0, 3}, {0, 4}})));
  }
}

TEST_CASE("holes: an element no piece covers is an error naming the tensor and element") {
  ScratchDir root;
  const Shape shape{5, 4};
  // Flat ranges [0, 7) and [9, 20): elements 7 and 8 ([1, 3] and [2, 0]) are missing.
  PieceSpec a{"h.1.mlp.c_fc.weight", TensorPiece::EXP_AVG_SQ, shape, Region::whole(shape)};
  PieceSpec b = a;
  a.region.flat_end = 7;
  b.region.flat_begin = 9;
  const Checkpoint c = Checkpoint::open(write_pieces(root.path(), {a, b}));
  CHECK_THROWS_WITH_AS(c.read(a.name, a.kind),
                       doctest::Contains("h.1.mlp.c_fc.weight (exp_avg_sq): 2 of 20 elements of "
                                         "[0:5, 0:4] flat [0, 20) are in no piece (first at [1, 3])"),
                       CheckpointError);
  // Regions clear of the hole read fine; one touching it does not.
  CHECK(bitwise_equal(c.read(a.name, a.kind, Region::of_box({{2, 3}, {1, 3}})),
                      expected_region(a.name, a.kind, shape, Region::of_box({{2, 3}, {1, 3}}))));
  CHECK_THROWS_WITH_AS(c.read(a.name, a.kind, Region::of_box({{2, 1}, {0, 4}})),
                       doctest::Contains("first at [2, 0]"), CheckpointError);
}

TEST_CASE("for_each_overlap visits exactly the common elements in runs") {
  // Brute force over small boxes and ranges: every element of the destination that
  // the source holds is visited once, with matching indices.
  const Shape shape{4, 5, 3};
  const Region src{{{1, 3}, {0, 5}, {1, 2}}, 3, 25};
  for (int64_t b = 0; b < 12; b += 5) {
    const Region dst{{{0, 4}, {2, 3}, {0, 3}}, b, 36 - b / 2};
    std::vector<int> seen(size_t(dst.elements()), 0);
    int64_t expected_runs_elements = 0;
    for_each_overlap(src, dst, [&](const Overlap& o) {
      for (int64_t i = 0; i < o.count; ++i) {
        ++seen[size_t(o.dst + i)];
        CHECK(expected_region("t", TensorPiece::PARAM, shape, dst)[size_t(o.dst + i)] ==
              expected_region("t", TensorPiece::PARAM, shape, src)[size_t(o.src + i)]);
      }
    });
    // Brute force: the global index sets of both regions.
    auto globals = [&](const Region& r) {
      std::vector<int64_t> g;
      for (int64_t j = r.flat_begin; j < r.flat_end; ++j) {
        int64_t rest = j, idx = 0, stride = 1;
        for (size_t d = 3; d-- > 0;) {
          idx += (r.box[d].offset + rest % r.box[d].extent) * stride;
          rest /= r.box[d].extent;
          stride *= shape[d];
        }
        g.push_back(idx);
      }
      return g;
    };
    const auto gs = globals(src), gd = globals(dst);
    for (size_t j = 0; j < gd.size(); ++j) {
      const bool held = std::find(gs.begin(), gs.end(), gd[j]) != gs.end();
      CHECK(seen[j] == (held ? 1 : 0));
      expected_runs_elements += held;
    }
    CHECK(expected_runs_elements > 0);
  }
}
