// Resharding with the compute core's real parameter registry: a DP2 x PP2
// checkpoint of initialized weights and optimizer state, written from flat stage
// buffers, loads bitwise into DP1 x PP1, DP4 x PP1 and DP3 x PP4 buffers.
#include <doctest/doctest.h>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/flat_layout.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "model/init.h"
#include "model/param_registry.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

Config small_config() {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(4);
  m->set_heads(2);
  m->set_width(16);
  m->set_vocab_size(50);
  m->set_max_positions(16);
  return c;
}

// The buffer of `layout` for `kind`: real initial weights for param and master,
// test_value of the global index for the Adam moments (identical across layouts).
std::vector<float> state_buffer(const Config& c, const model::ParameterRegistry& reg,
                                TensorKind kind) {
  std::vector<float> buf(size_t(reg.total()));
  if (kind == TensorPiece::PARAM || kind == TensorPiece::MASTER) {
    model::init_parameters(reg, c.training().seed(), buf.data());
    return buf;
  }
  for (const auto& t : flat_layout(reg)) {
    const auto v = expected_region(t.name, kind, t.global_shape, Region::of_box(t.box));
    std::copy(v.begin(), v.end(), buf.begin() + t.offset);
  }
  return buf;
}

std::vector<float> slice(const std::vector<float>& v, int64_t b, int64_t e) {
  return std::vector<float>(v.begin() + b, v.begin() + e);
}

}  // namespace

TEST_CASE("flat ranges of registry buffers: DP2 x PP2 -> DP1 x PP1, DP4 x PP1, DP3 x PP4") {
  const Config c = small_config();
  const TensorKind kinds[] = {TensorPiece::PARAM, TensorPiece::MASTER, TensorPiece::EXP_AVG,
                              TensorPiece::EXP_AVG_SQ};
  ScratchDir root;
  {
    auto commit = CheckpointCommit::begin(root.path(), 3);
    CheckpointManifest m;
    set_manifest_config(m, c);
    set_position(m, 3, c.batch().global_batch_size());
    for (int s = 0; s < 2; ++s) {
      const model::ParameterRegistry reg(c, model::StageRange::pipeline(c, s, 2));
      const FlatLayout layout = flat_layout(reg);
      for (int d = 0; d < 2; ++d) {
        ShardWriter w(commit.partial_dir(), "dp" + std::to_string(d) + "_pp" + std::to_string(s));
        const int64_t lo = reg.total() * d / 2, hi = reg.total() * (d + 1) / 2;
        for (TensorKind k : kinds) {
          const auto buf = state_buffer(c, reg, k);
          if (k == TensorPiece::PARAM) {
            if (d == 0) write_flat_range(w, layout, k, buf.data(), 0, reg.total());
          } else {
            write_flat_range(w, layout, k, buf.data(), lo, hi);
          }
        }
        *m.add_shard() = w.finish();
      }
    }
    commit.commit(m, 0);
  }
  const LoadOutcome loaded = load_latest(root.path());
  REQUIRE(loaded.checkpoint);
  const Checkpoint& ckpt = *loaded.checkpoint;

  // DP1 x PP1 (whole buffers) and DP4 x PP1 (quarters) of the one-stage model.
  const model::ParameterRegistry whole(c, model::StageRange::whole(c));
  for (TensorKind k : kinds) {
    CAPTURE(kind_name(k));
    const auto want = state_buffer(c, whole, k);
    std::vector<float> got(want.size(), -7.0f);
    read_flat_range(ckpt, flat_layout(whole), k, 0, whole.total(), got.data());
    CHECK(bitwise_equal(got, want));
    for (int r = 0; r < 4; ++r) {
      const int64_t lo = whole.total() * r / 4, hi = whole.total() * (r + 1) / 4;
      std::vector<float> part(size_t(hi - lo));
      read_flat_range(ckpt, flat_layout(whole), k, lo, hi, part.data());
      CHECK(bitwise_equal(part, slice(want, lo, hi)));
    }
  }
  // DP3 x PP4: every stage one layer, the last with its tied copy of wte.
  for (int s = 0; s < 4; ++s) {
    const model::ParameterRegistry reg(c, model::StageRange::pipeline(c, s, 4));
    for (TensorKind k : kinds) {
      const auto want = state_buffer(c, reg, k);
      for (int r = 0; r < 3; ++r) {
        const int64_t lo = reg.total() * r / 3, hi = reg.total() * (r + 1) / 3;
        std::vector<float> part(size_t(hi - lo));
        read_flat_range(ckpt, flat_layout(reg), k, lo, hi, part.data());
        CHECK(bitwise_equal(part, slice(want, lo, hi)));
      }
    }
  }
  // The initial weights are real ones: wte's padding rows are zero, others not.
  const auto wte = ckpt.read("wte.weight", TensorPiece::PARAM);
  CHECK(wte.size() == size_t(64 * 16));
  CHECK(wte[49 * 16] != 0.0f);
  CHECK(wte[50 * 16] == 0.0f);
}

TEST_CASE("read_flat_range names a tensor the checkpoint lacks or shapes differently") {
  const Config c = small_config();
  ScratchDir root;
  const model::ParameterRegistry reg(c, model::StageRange::pipeline(c, 0, 2));
  {
    auto commit = CheckpointCommit::begin(root.path(), 1);
    CheckpointManifest m;
    set_manifest_config(m, c);
    m.set_step(1);
    ShardWriter w(commit.partial_dir(), "only");
    const auto buf = state_buffer(c, reg, TensorPiece::PARAM);
    write_flat_range(w, flat_layout(reg), TensorPiece::PARAM, buf.data(), 0, reg.total());
    *m.add_shard() = w.finish();
    commit.commit(m, 0);
  }
  const Checkpoint ckpt = Checkpoint::open(root / "step_00000001");
  const model::ParameterRegistry last(c, model::StageRange::pipeline(c, 1, 2));
  std::vector<float> out(size_t(last.total()));
  CHECK_THROWS_WITH_AS(read_flat_range(ckpt, flat_layout(last), TensorPiece::PARAM, 0,
                                       last.total(), out.data()),
                       doctest::Contains("no tensor h.2.ln_1.weight (param) to load"),
                       CheckpointError);
  Config wider = c;
  wider.mutable_model()->set_max_positions(32);
  const model::ParameterRegistry other(wider, model::StageRange::pipeline(wider, 0, 2));
  std::vector<float> out2(size_t(other.total()));
  CHECK_THROWS_WITH_AS(read_flat_range(ckpt, flat_layout(other), TensorPiece::PARAM, 0,
                                       other.total(), out2.data()),
                       doctest::Contains("wpe.weight (param) has shape [16, 16] in the checkpoint, "
                                         "the layout expects [32, 16]"),
                       CheckpointError);
}
