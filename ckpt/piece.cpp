#include "ckpt/piece.h"

#include "ckpt/error.h"
#include "ckpt/format.h"

namespace troupe::ckpt {

const char* kind_name(TensorKind kind) {
  switch (kind) {
    case TensorPiece::PARAM: return "param";
    case TensorPiece::MASTER: return "master";
    case TensorPiece::EXP_AVG: return "exp_avg";
    case TensorPiece::EXP_AVG_SQ: return "exp_avg_sq";
  }
  return "unknown";
}

TensorKind parse_kind(std::string_view text) {
  for (TensorKind k : {TensorPiece::PARAM, TensorPiece::MASTER, TensorPiece::EXP_AVG,
                       TensorPiece::EXP_AVG_SQ})
    if (text == kind_name(k)) return k;
  throw CheckpointError("unknown tensor kind '" + std::string(text) +
                        "' (expected param, master, exp_avg or exp_avg_sq)");
}

Shape piece_shape(const TensorPiece& piece) {
  return Shape(piece.global_shape().begin(), piece.global_shape().end());
}

Region piece_region(const TensorPiece& piece) {
  Region r;
  for (const auto& d : piece.slice()) r.box.push_back({d.offset(), d.extent()});
  r.flat_begin = piece.flat_begin();
  r.flat_end = piece.flat_end();
  return r;
}

void set_piece_geometry(TensorPiece& piece, const std::string& name, TensorKind kind,
                        const Shape& shape, const Region& region) {
  piece.set_name(name);
  piece.set_kind(kind);
  piece.set_dtype(TensorPiece::F32);
  piece.clear_global_shape();
  for (int64_t d : shape) piece.add_global_shape(d);
  piece.clear_slice();
  for (const auto& d : region.box) {
    auto* s = piece.add_slice();
    s->set_offset(d.offset);
    s->set_extent(d.extent);
  }
  piece.set_flat_begin(region.flat_begin);
  piece.set_flat_end(region.flat_end);
}

uint64_t piece_bytes(const TensorPiece& piece) {
  return uint64_t(piece.flat_end() - piece.flat_begin()) * sizeof(float);
}

void check_piece(const TensorPiece& piece, uint64_t data_begin, uint64_t data_end,
                 const std::string& where) {
  if (piece.name().empty()) throw CheckpointError(where + ": piece without a name");
  const std::string label = where + ": " + tensor_label(piece.name(), piece.kind());
  if (piece.dtype() != TensorPiece::F32)
    throw CheckpointError(label + ": dtype " + std::to_string(int(piece.dtype())) +
                          " not supported (only F32)");
  check_region(piece_shape(piece), piece_region(piece), label);
  const uint64_t begin = piece.byte_offset(), bytes = piece_bytes(piece);
  if (begin % kPieceAlignment != 0)
    throw CheckpointError(label + ": byte_offset " + std::to_string(begin) +
                          " is not a multiple of " + std::to_string(kPieceAlignment));
  if (begin < data_begin || begin > data_end || bytes > data_end - begin)
    throw CheckpointError(label + ": data [" + std::to_string(begin) + ", " +
                          std::to_string(begin + bytes) + ") lies outside the data region [" +
                          std::to_string(data_begin) + ", " + std::to_string(data_end) + ")");
}

std::string tensor_label(const std::string& name, TensorKind kind) {
  return name + " (" + kind_name(kind) + ")";
}

}  // namespace troupe::ckpt
