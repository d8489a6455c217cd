// Conversions between the manifest's TensorPiece and the geometry of ckpt/region.h,
// and the rules every piece obeys.
#pragma once

#include <string>
#include <string_view>

#include "ckpt/region.h"
#include "messages/checkpoint.pb.h"

namespace troupe::ckpt {

using TensorKind = TensorPiece::Kind;

// "param", "master", "exp_avg", "exp_avg_sq".
const char* kind_name(TensorKind kind);
// Inverse of kind_name; throws CheckpointError naming the text otherwise.
TensorKind parse_kind(std::string_view text);

Shape piece_shape(const TensorPiece& piece);
Region piece_region(const TensorPiece& piece);
// Fills name, kind, dtype, global_shape, slice and flat range.
void set_piece_geometry(TensorPiece& piece, const std::string& name, TensorKind kind,
                        const Shape& shape, const Region& region);

// Bytes of the piece's data in the shard file.
uint64_t piece_bytes(const TensorPiece& piece);

// Checks a piece read from a manifest or shard table: name set, dtype F32, shape
// and region valid (check_region), byte_offset aligned and its data inside
// [data_begin, data_end) of the file. `where` prefixes every error.
void check_piece(const TensorPiece& piece, uint64_t data_begin, uint64_t data_end,
                 const std::string& where);

// "h.0.ln_1.weight (param)"
std::string tensor_label(const std::string& name, TensorKind kind);

}  // namespace troupe::ckpt
