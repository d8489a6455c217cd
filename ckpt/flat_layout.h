// Checkpoint pieces of a flat parameter buffer, and the way back.
//
// A stage keeps its parameters (and gradients, master weights, Adam moments) in
// one contiguous fp32 buffer: tensor after tensor, each the local box of a global
// tensor (model::ParameterRegistry). The distributed optimizer gives each
// data-parallel rank a contiguous range [begin, end) of that buffer, which may
// cut tensors anywhere. Writing a range turns it into one piece per tensor it
// touches; reading a range assembles it from whatever pieces a checkpoint holds,
// written under any other layout (the resharding path of a resume).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/piece.h"
#include "ckpt/reader.h"
#include "ckpt/region.h"
#include "ckpt/shard_writer.h"

namespace troupe::model {
class ParameterRegistry;
}

namespace troupe::ckpt {

// One tensor of a flat buffer: its global name and shape, the box it holds, and
// where its box_elements(box) values start in the buffer (row-major).
struct LocalTensor {
  std::string name;
  Shape global_shape;
  Box box;
  int64_t offset = 0;
};
using FlatLayout = std::vector<LocalTensor>;

// The layout of a registry's buffer (names, global shapes, slices, offsets).
FlatLayout flat_layout(const model::ParameterRegistry& registry);

// The piece of every tensor that [begin, end) of the buffer touches, with the
// buffer offset of its first value.
struct FlatPiece {
  PieceSpec spec;
  int64_t buffer_offset = 0;
};
std::vector<FlatPiece> flat_range_pieces(const FlatLayout& layout, TensorKind kind,
                                         int64_t begin, int64_t end);

// Adds the pieces of buffer[begin, end) to `writer`.
void write_flat_range(ShardWriter& writer, const FlatLayout& layout, TensorKind kind,
                      const float* buffer, int64_t begin, int64_t end);

// Fills out[0, end - begin) with buffer positions [begin, end) of `layout`, read
// from `checkpoint` (any layout it was written under). Throws CheckpointError
// naming the tensor when the checkpoint lacks it, its shape differs, or an
// element is missing or its replicas disagree. Positions between tensors (a
// layout with gaps) are left untouched.
void read_flat_range(const Checkpoint& checkpoint, const FlatLayout& layout, TensorKind kind,
                     int64_t begin, int64_t end, float* out);

}  // namespace troupe::ckpt
