#include "data/packing.h"

namespace troupe::data {

void fill_row(const Window& w, const int32_t* window_tokens, int32_t pad_id, int row,
              Microbatch& mb) {
  const int32_t T = mb.seq;
  const size_t base = size_t(row) * size_t(T);
  auto token_at = [&](int32_t slot) { return slot < w.used ? window_tokens[slot] : pad_id; };
  for (int32_t j = 0; j < T; ++j) {
    mb.tokens[base + size_t(j)] = token_at(j);
    mb.targets[base + size_t(j)] = token_at(j + 1);
  }
  int32_t segment = 0;
  for (const Piece& piece : w.pieces) {
    const int32_t end = std::min(piece.slot + piece.length, T);
    for (int32_t j = piece.slot; j < end; ++j) {
      mb.positions[base + size_t(j)] = j - piece.slot;
      mb.segments[base + size_t(j)] = segment;
      // The target at slot j + 1 belongs to this piece unless j is its last slot.
      mb.loss_mask[base + size_t(j)] = j + 1 < piece.slot + piece.length ? 1.0f : 0.0f;
    }
    ++segment;
  }
  for (int32_t j = w.used; j < T; ++j) {
    mb.positions[base + size_t(j)] = j - w.used;
    mb.segments[base + size_t(j)] = segment;
    mb.loss_mask[base + size_t(j)] = 0.0f;
  }
}

}  // namespace troupe::data
