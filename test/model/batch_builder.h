// Test helper: packs documents into microbatches by the rules of docs/numerics.md
// ("Packed windows"),
// independently of the data library. A row is a window of T + 1 tokens: documents end
// to end, each followed by EOD, cut at the window's end (a long document simply
// stops), then padding. Inputs are window[0:T], targets window[1:T+1]; positions
// restart at 0 at each document (EOD takes the next position) and at the padding;
// each document and the padding are their own segment; the loss mask is 1 where
// input and target belong to the same document (so the EOD prediction counts) and 0
// for the prediction after an EOD and for padding.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace troupe::testing {

constexpr int32_t kEod = 256;         // the byte tokenizer's EOD
constexpr int32_t kPadSegment = 9999; // segment ID of padding

struct Row {
  std::vector<std::vector<int32_t>> docs;
  int32_t pad_token = kEod;
};

inline data::Microbatch pack_rows(const std::vector<Row>& rows, int T) {
  data::Microbatch mb;
  mb.batch = int32_t(rows.size());
  mb.seq = T;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<int32_t> win, seg, pos;
    for (size_t d = 0; d < rows[r].docs.size() && int(win.size()) < T + 1; ++d) {
      std::vector<int32_t> doc = rows[r].docs[d];
      doc.push_back(kEod);
      for (size_t k = 0; k < doc.size() && int(win.size()) < T + 1; ++k) {
        win.push_back(doc[k]);
        seg.push_back(int32_t(d));
        pos.push_back(int32_t(k));
      }
    }
    int32_t padpos = 0;
    while (int(win.size()) < T + 1) {
      win.push_back(rows[r].pad_token);
      seg.push_back(kPadSegment);
      pos.push_back(padpos++);
    }
    for (int t = 0; t < T; ++t) {
      mb.tokens.push_back(win[size_t(t)]);
      mb.targets.push_back(win[size_t(t) + 1]);
      mb.positions.push_back(pos[size_t(t)]);
      mb.segments.push_back(seg[size_t(t)]);
      const bool counts = seg[size_t(t)] != kPadSegment && seg[size_t(t)] == seg[size_t(t) + 1];
      mb.loss_mask.push_back(counts ? 1.0f : 0.0f);
      mb.loss_tokens += counts;
      mb.padding_tokens += seg[size_t(t)] == kPadSegment;
    }
    mb.sample_ids.push_back(int64_t(r));
  }
  return mb;
}

// Sets every microbatch's global_loss_tokens to the batch total.
inline void set_global_tokens(std::vector<data::Microbatch>& mbs) {
  int64_t total = 0;
  for (const auto& mb : mbs) total += mb.loss_tokens;
  for (auto& mb : mbs) mb.global_loss_tokens = total;
}

// Deterministic pseudo-random token IDs in [0, 256) (text bytes, never EOD).
inline std::vector<int32_t> doc_tokens(int len, uint32_t seed) {
  std::vector<int32_t> out;
  uint32_t x = seed * 2654435761u + 12345u;
  for (int i = 0; i < len; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out.push_back(int32_t(x % 256));
  }
  return out;
}

}  // namespace troupe::testing
