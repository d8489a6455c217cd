// Checkpoints of tensor-parallel stages: every rank writes its flat buffer's pieces
// by name and global box (the c_attn q, k, v pieces as three boxes), and any other
// (dp, pp, tp) layout reads them back. The vocabulary padding differs between
// tensor-parallel sizes (padded_vocab rounds to vocab_pad_multiple x tp): only the
// real rows are read, padding rows stay zero. Everything else is bitwise.
#include <doctest/doctest.h>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/flat_layout.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "config/derived.h"
#include "engine/checkpointing.h"
#include "engine/stage_worker.h"
#include "model/init.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

const TensorKind kKinds[] = {TensorPiece::PARAM, TensorPiece::EXP_AVG, TensorPiece::EXP_AVG_SQ};

// 50 real tokens: 64 padded rows at TP1, 128 at TP2, 256 at TP4. head_dim > 0: a
// Llama of 4 heads of head_dim (model.head_dim) sharing 2 kv heads instead of GPT-2.
Config layout_config(int tp, int pp, int dp, int head_dim = 0) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(4);
  m->set_heads(4);
  m->set_width(16);
  m->set_vocab_size(50);
  m->set_max_positions(16);
  if (head_dim > 0) {
    m->set_architecture(ModelConfig::LLAMA);
    m->set_kv_heads(2);
    m->set_head_dim(head_dim);
    m->set_ffn_width(32);
    m->set_tied_embeddings(false);
  }
  c.mutable_parallel()->set_tensor(tp);
  c.mutable_parallel()->set_pipeline(pp);
  c.mutable_parallel()->set_data(dp);
  return c;
}

// What a rank's buffer of `kind` holds: real initial weights for param, test_value of
// the global index for the moments; vocabulary padding rows zero (they are never
// trained: weights and gradients stay zero there).
std::vector<float> state_buffer(const Config& c, const model::ParameterRegistry& reg, TensorKind kind) {
  std::vector<float> buf(size_t(reg.total()));
  if (kind == TensorPiece::PARAM) {
    model::init_parameters(reg, c.training().seed(), buf.data());
    return buf;
  }
  for (const auto& t : flat_layout(reg)) {
    const auto v = expected_region(t.name, kind, t.global_shape, Region::of_box(t.box));
    std::copy(v.begin(), v.end(), buf.begin() + t.offset);
  }
  for (const auto& t : reg.tensors()) {
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    for (int64_t i = 0; i < t.numel; ++i)
      if (t.slice_start[0] + i / cols >= t.valid_rows) buf[size_t(t.offset + i)] = 0.0f;
  }
  return buf;
}

// A checkpoint of every rank of layout (tp, pp, dp), as the runtime writes it:
// data-parallel rank 0 writes the parameters, each rank its flat range of moments.
void write_layout(const std::string& root, int64_t step, int tp, int pp, int dp, int head_dim = 0) {
  const Config c = layout_config(tp, pp, dp, head_dim);
  auto commit = CheckpointCommit::begin(root, step);
  CheckpointManifest m;
  set_manifest_config(m, c);
  m.set_step(step);
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t) {
      const auto reg = engine::stage_registry(c, {0, s, t});
      const auto layout = flat_layout(reg);
      for (int d = 0; d < dp; ++d) {
        ShardWriter w(commit.partial_dir(), engine::shard_file_name({d, s, t}));
        const int64_t lo = reg.total() * d / dp, hi = reg.total() * (d + 1) / dp;
        for (TensorKind k : kKinds) {
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

// Every rank of layout (tp, pp, dp) reads its ranges and gets its own state buffer.
void check_reads_as(const Checkpoint& ck, int tp, int pp, int dp, int head_dim = 0) {
  CAPTURE(tp);
  CAPTURE(pp);
  CAPTURE(dp);
  const Config c = layout_config(tp, pp, dp, head_dim);
  for (int s = 0; s < pp; ++s)
    for (int t = 0; t < tp; ++t) {
      const auto reg = engine::stage_registry(c, {0, s, t});
      const auto layout = engine::reading_layout(ck, reg);
      for (TensorKind k : kKinds) {
        CAPTURE(kind_name(k));
        const auto want = state_buffer(c, reg, k);
        for (int d = 0; d < dp; ++d) {
          const int64_t lo = reg.total() * d / dp, hi = reg.total() * (d + 1) / dp;
          std::vector<float> got(size_t(hi - lo), 0.0f);
          read_flat_range(ck, layout, k, lo, hi, got.data());
          REQUIRE(bitwise_equal(got, std::vector<float>(want.begin() + lo, want.begin() + hi)));
        }
      }
    }
}

}  // namespace

TEST_CASE("a TP2 x PP2 x DP2 checkpoint loads into TP1, TP4 and other pipeline cuts, and back") {
  ScratchDir root;
  write_layout(root.path(), 1, 2, 2, 2);
  const Checkpoint tp2 = Checkpoint::open(root / "step_00000001");
  // c_attn of one TP2 rank: three pieces (q, k, v) under one name.
  CHECK(tp2.read("h.0.attn.c_attn.weight", TensorPiece::PARAM).size() == size_t(16 * 48));
  CHECK(tp2.shape("wte.weight", TensorPiece::PARAM) == Shape{128, 16});
  check_reads_as(tp2, 1, 1, 1);
  check_reads_as(tp2, 1, 1, 3);
  check_reads_as(tp2, 4, 1, 2);
  check_reads_as(tp2, 1, 4, 1);
  check_reads_as(tp2, 2, 2, 2);
  check_reads_as(tp2, 2, 4, 3);

  // And back: TP1 x PP1 x DP2 into TP2 x PP2 and TP4 x PP2.
  write_layout(root.path(), 2, 1, 1, 2);
  const Checkpoint tp1 = Checkpoint::open(root / "step_00000002");
  CHECK(tp1.shape("wte.weight", TensorPiece::PARAM) == Shape{64, 16});
  check_reads_as(tp1, 2, 2, 2);
  check_reads_as(tp1, 4, 2, 1);
}

TEST_CASE("a Llama checkpoint with model.head_dim reshards: TP2 x PP2 x DP2 into TP1 and TP4, and back") {
  // 4 heads of 6 over width 16: q_proj [24, 16] split by rows of whole heads, o_proj
  // [16, 24] by columns; 2 kv heads split at TP2, whole on every rank at TP4.
  ScratchDir root;
  write_layout(root.path(), 1, 2, 2, 2, 6);
  const Checkpoint tp2 = Checkpoint::open(root / "step_00000001");
  CHECK(tp2.shape("model.layers.0.self_attn.q_proj.weight", TensorPiece::PARAM) == Shape{24, 16});
  CHECK(tp2.shape("model.layers.0.self_attn.o_proj.weight", TensorPiece::PARAM) == Shape{16, 24});
  CHECK(tp2.shape("model.layers.0.self_attn.k_proj.weight", TensorPiece::PARAM) == Shape{12, 16});
  check_reads_as(tp2, 1, 1, 1, 6);
  check_reads_as(tp2, 4, 2, 1, 6);
  check_reads_as(tp2, 2, 4, 3, 6);
  write_layout(root.path(), 2, 4, 1, 1, 6);
  const Checkpoint tp4 = Checkpoint::open(root / "step_00000002");
  check_reads_as(tp4, 2, 2, 2, 6);
  check_reads_as(tp4, 1, 1, 1, 6);
}

TEST_CASE("a checkpoint whose embedding has fewer rows than the vocabulary is refused by name") {
  ScratchDir root;
  write_layout(root.path(), 1, 2, 1, 1);
  const Checkpoint ck = Checkpoint::open(root / "step_00000001");
  Config bigger = layout_config(1, 1, 1);
  bigger.mutable_model()->set_vocab_size(200);  // 256 padded rows, 200 real: the checkpoint has 128
  const auto reg = engine::stage_registry(bigger, {0, 0, 0});
  std::vector<float> out(size_t(reg.total()));
  CHECK_THROWS_WITH_AS(read_flat_range(ck, engine::reading_layout(ck, reg), TensorPiece::PARAM, 0, reg.total(),
                                       out.data()),
                       doctest::Contains("wte.weight (param) has shape [128, 16] in the checkpoint"),
                       CheckpointError);
}
