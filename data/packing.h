// Packing documents into samples. A sample is a window of T + 1 tokens (T =
// seq_length): inputs are window[0:T], targets window[1:T+1]. Documents (the
// .idx's sequences, each ending in EOD) are laid end to end in the split's
// document order; the window rule is one function, used both to build the sample
// index and to materialise a sample, so the two cannot disagree.
//
// Continuous mode (default, Megatron's): sample k covers stream tokens
// [k*T, k*T + T + 1); consecutive samples share one token (the last target of one is
// the first input of the next), so every in-document prediction is made exactly
// once. A document longer than the window continues in the next sample. The tail of
// the stream that cannot fill a whole window is dropped (fewer than T tokens).
//
// Pad-to-boundary mode: a sample starts with one piece (a whole document, or the
// rest of one that did not fit before), then takes further documents only while
// they fit whole; the tail is padding. Only a document longer than the window is
// cut, continuing (with the same one-token overlap) in the next sample.
//
// Inside a sample each piece of a document is a segment: positions restart at 0,
// attention stays inside it, and the prediction out of its last token (EOD -> the
// next document's first token, or into padding) carries no loss. The prediction of
// EOD itself is learned. Padding is a segment of its own and carries no loss.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace troupe::data {

// A point in the document stream: document `doc` (a position in the split's
// document order) at token `offset`.
struct StreamPos {
  int64_t doc = 0;
  int64_t offset = 0;
};

struct Piece {
  int64_t doc = 0;     // position in the document order
  int64_t offset = 0;  // first token taken from the document
  int32_t slot = 0;    // where it starts in the window
  int32_t length = 0;  // tokens taken
};

struct Window {
  std::vector<Piece> pieces;
  int32_t used = 0;        // slots filled by tokens; the rest [used, T+1) is padding
  bool complete = false;   // false: the stream ran out before a sample could be made
  StreamPos next;          // where the next sample starts
  // Loss-bearing predictions: sum over pieces of (length - 1).
  int32_t loss_tokens = 0;
  // Padding among the T inputs: max(0, T - used).
  int32_t padding_tokens = 0;
};

// length_of(doc) -> tokens of the document at that position; `docs` documents.
template <class LengthOf>
void next_window(const LengthOf& length_of, int64_t docs, StreamPos start, int32_t seq_length,
                 bool pad_to_boundary, Window& w) {
  const int64_t cap = int64_t(seq_length) + 1;
  w.pieces.clear();
  w.used = 0;
  w.loss_tokens = 0;
  w.complete = false;
  StreamPos p = start;
  while (p.doc < docs && p.offset >= length_of(p.doc)) p = {p.doc + 1, 0};  // skip empty documents
  if (p.doc >= docs) return;

  auto take = [&](int64_t n) {
    w.pieces.push_back({p.doc, p.offset, w.used, int32_t(n)});
    w.used += int32_t(n);
    w.loss_tokens += int32_t(n - 1);
  };

  if (!pad_to_boundary) {
    while (w.used < cap && p.doc < docs) {
      const int64_t left = length_of(p.doc) - p.offset;
      if (left <= 0) {
        p = {p.doc + 1, 0};
        continue;
      }
      const int64_t n = std::min<int64_t>(left, cap - w.used);
      take(n);
      p = n == left ? StreamPos{p.doc + 1, 0} : StreamPos{p.doc, p.offset + n};
    }
    if (w.used < cap) return;
    // The last token of this window is the first of the next.
    const Piece& last = w.pieces.back();
    w.next = {last.doc, last.offset + last.length - 1};
  } else {
    const int64_t left = length_of(p.doc) - p.offset;
    if (left > cap) {
      take(cap);
      w.next = {p.doc, p.offset + cap - 1};
    } else {
      take(left);
      p = {p.doc + 1, 0};
      while (p.doc < docs && length_of(p.doc) <= cap - w.used) {
        if (length_of(p.doc) > 0) take(length_of(p.doc));
        p = {p.doc + 1, 0};
      }
      w.next = p;
    }
  }
  w.complete = true;
  w.padding_tokens = std::max<int32_t>(0, seq_length - w.used);
}

// Fills row `row` of mb (tokens, targets, positions, segments, loss_mask) from a
// window whose tokens are window_tokens[0 .. used) (slots past `used` are padding
// and hold pad_id). mb's vectors must already have batch * seq entries.
void fill_row(const Window& w, const int32_t* window_tokens, int32_t pad_id, int row,
              Microbatch& mb);

}  // namespace troupe::data
