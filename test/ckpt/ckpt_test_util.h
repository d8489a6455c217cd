// Shared helpers of the checkpoint tests: deterministic
// tensor values, and a small GPT-2-like set of tensors with layouts to cut it.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/region.h"
#include "ckpt/commit_point.h"
#include "ckpt/shard_writer.h"
#include "messages/checkpoint.pb.h"
#include "test/support/scratch_dir.h"

namespace troupe::ckpt::testing {

using ::troupe::testing::ScratchDir;  // test/support/scratch_dir.h

// The value element `index` (row-major, global) of tensor (name, kind) holds in
// these tests: a hash of the three mapped into [-1, 1), distinct per tensor and kind.
float test_value(const std::string& name, TensorKind kind, int64_t index);

// Expected values of `region` of the global tensor, computed element by element
// (independently of the library's overlap code).
std::vector<float> expected_region(const std::string& name, TensorKind kind, const Shape& shape,
                                   const Region& region);

// A small GPT-2 model's tensors in parameter-registry order for 2 layers, width 8,
// padded vocab 24, positions 6: wte, wpe, h.0.*, h.1.*, ln_f.*.
struct NamedShape {
  std::string name;
  Shape shape;
};
std::vector<NamedShape> small_gpt2_tensors();

// Pieces of the distributed-optimizer kind: the tensors (whole, in order) form one
// flat buffer, cut into `ranks` equal contiguous parts (the last takes the rest);
// returns rank `rank`'s pieces, which may start or end in the middle of a row.
std::vector<PieceSpec> flat_shard_pieces(const std::vector<NamedShape>& tensors, TensorKind kind,
                                         int ranks, int rank);

// The tensors pipeline stage `stage` of `stages` holds, in registry order: its
// share of the blocks, wte/wpe on the first stage, ln_f and (when it is not also
// the first) a tied copy of wte on the last.
std::vector<NamedShape> stage_tensors(int stage, int stages);

// Writes a complete checkpoint of small_gpt2_tensors() at `step` under `root`,
// laid out as data `dp` x pipeline `pp`: rank (d, p) writes shard "dp{d}_pp{p}.shard"
// with the stage's params (d == 0 only) and its flat optimizer shard of master,
// exp_avg and exp_avg_sq. Returns the final checkpoint directory.
std::string save_test_checkpoint(const std::string& root, int64_t step, int dp, int pp,
                                 int keep_last, const CommitHook& hook = {});

// Sets the manifest's step and the counters a resume checks against it (every update
// successful, `global_batch` samples each): consumed_samples, successful_updates,
// lr_schedule_samples, data_position.consumed_samples.
void set_position(CheckpointManifest& m, int64_t step, int64_t global_batch);

// The manifest fields save_test_checkpoint sets for `step`, for comparison.
CheckpointManifest test_manifest(int64_t step, int dp, int pp);

// Adds `spec` to `writer` with test_value data.
void add_test_piece(ShardWriter& writer, const PieceSpec& spec);

// Bitwise equality of two float vectors (NaN-safe).
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Bytes of a file.
std::string file_bytes(const std::string& path);

// Names in a directory, sorted.
std::vector<std::string> dir_entries(const std::string& dir);

}  // namespace troupe::ckpt::testing
