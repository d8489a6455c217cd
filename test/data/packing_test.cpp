// Packing: window boundaries, position resets, segments, loss and padding masks,
// counts — continuous and pad-to-boundary modes, on hand-made documents.
#include <doctest/doctest.h>

#include <numeric>

#include "data/packing.h"

using namespace troupe::data;

namespace {

// Documents of the given lengths; document d's token k is 100*d + k, except the
// last token of each document which is EOD (9).
struct Docs {
  std::vector<int64_t> lengths;
  int32_t token(int64_t d, int64_t k) const { return k + 1 == lengths[size_t(d)] ? 9 : int32_t(100 * d + k); }
};

struct Sample {
  Window w;
  Microbatch mb;
};

std::vector<Sample> pack_all(const Docs& docs, int32_t T, bool pad) {
  std::vector<Sample> out;
  auto len = [&](int64_t d) { return docs.lengths[size_t(d)]; };
  StreamPos p;
  while (true) {
    Sample s;
    next_window(len, int64_t(docs.lengths.size()), p, T, pad, s.w);
    if (!s.w.complete) break;
    std::vector<int32_t> window(size_t(T) + 1, -1);
    for (const Piece& piece : s.w.pieces) {
      for (int32_t k = 0; k < piece.length; ++k) window[size_t(piece.slot + k)] = docs.token(piece.doc, piece.offset + k);
    }
    s.mb.batch = 1;
    s.mb.seq = T;
    for (auto* v : {&s.mb.tokens, &s.mb.targets, &s.mb.positions, &s.mb.segments}) v->assign(size_t(T), -7);
    s.mb.loss_mask.assign(size_t(T), -1.f);
    fill_row(s.w, window.data(), /*pad_id=*/0, 0, s.mb);
    p = s.w.next;
    out.push_back(std::move(s));
  }
  return out;
}

float mask_sum(const Microbatch& mb) { return std::accumulate(mb.loss_mask.begin(), mb.loss_mask.end(), 0.f); }

}  // namespace

TEST_CASE("continuous packing: documents end to end, windows overlap by one token") {
  // Lengths 3, 5, 2, 6 = 16 tokens; T = 4: samples cover [0,5) [4,9) [8,13) [12,17)->
  // the last needs token 16, which does not exist, so 3 samples.
  const Docs docs{{3, 5, 2, 6}};
  const auto s = pack_all(docs, 4, false);
  REQUIRE(s.size() == 3);

  // Sample 0: doc0 [0,3) + doc1 [0,2).
  const Microbatch& a = s[0].mb;
  CHECK(a.tokens == std::vector<int32_t>{0, 1, 9, 100});
  CHECK(a.targets == std::vector<int32_t>{1, 9, 100, 101});
  CHECK(a.positions == std::vector<int32_t>{0, 1, 2, 0});
  CHECK(a.segments == std::vector<int32_t>{0, 0, 0, 1});
  // EOD is learned (1 -> 9); the prediction EOD -> next document's first token is not.
  CHECK(a.loss_mask == std::vector<float>{1, 1, 0, 1});
  CHECK(s[0].w.loss_tokens == 3);
  CHECK(s[0].w.padding_tokens == 0);

  // Sample 1 starts at stream token 4 = doc1 offset 1: positions restart at the sample start.
  const Microbatch& b = s[1].mb;
  CHECK(b.tokens == std::vector<int32_t>{101, 102, 103, 9});
  CHECK(b.targets == std::vector<int32_t>{102, 103, 9, 200});
  CHECK(b.positions == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(b.loss_mask == std::vector<float>{1, 1, 1, 0});

  // Sample 2: stream [8, 13): doc2 (2 tokens) + doc3 [0,3).
  const Microbatch& c = s[2].mb;
  CHECK(c.tokens == std::vector<int32_t>{200, 9, 300, 301});
  CHECK(c.positions == std::vector<int32_t>{0, 1, 0, 1});
  CHECK(c.segments == std::vector<int32_t>{0, 0, 1, 1});
  CHECK(c.loss_mask == std::vector<float>{1, 0, 1, 1});

  // Every in-document prediction of the stream is made exactly once: document d of
  // length L has L-1, and the tail of doc3 past the last window is dropped.
  int loss = 0;
  for (const auto& x : s) {
    CHECK(int(mask_sum(x.mb)) == x.w.loss_tokens);
    loss += x.w.loss_tokens;
  }
  CHECK(loss == (3 - 1) + (5 - 1) + (2 - 1) + 2);
}

TEST_CASE("a document longer than the window continues in the next samples") {
  const Docs docs{{11}};
  const auto s = pack_all(docs, 4, false);
  REQUIRE(s.size() == 2);  // (11 - 1) / 4 windows
  CHECK(s[0].mb.tokens == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(s[1].mb.tokens == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(s[1].mb.positions == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(s[0].mb.loss_mask == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("pad-to-boundary: whole documents only, the tail padded and masked") {
  // T = 5, windows of 6 slots. Lengths 3, 2, 4, 9, 1.
  const Docs docs{{3, 2, 4, 9, 1}};
  const auto s = pack_all(docs, 5, true);
  // [doc0 doc1 pad] [doc2 pad pad] [doc3 0..5] [doc3 5..9 + doc4] -> 4 samples
  REQUIRE(s.size() == 4);

  const Microbatch& a = s[0].mb;
  CHECK(s[0].w.used == 5);
  CHECK(a.tokens == std::vector<int32_t>{0, 1, 9, 100, 9});
  CHECK(a.targets == std::vector<int32_t>{1, 9, 100, 9, 0});
  CHECK(a.segments == std::vector<int32_t>{0, 0, 0, 1, 1});
  CHECK(a.positions == std::vector<int32_t>{0, 1, 2, 0, 1});
  CHECK(a.loss_mask == std::vector<float>{1, 1, 0, 1, 0});
  CHECK(s[0].w.padding_tokens == 0);  // the pad slot is slot 5: a target only

  const Microbatch& b = s[1].mb;
  CHECK(b.tokens == std::vector<int32_t>{200, 201, 202, 9, 0});
  CHECK(b.segments == std::vector<int32_t>{0, 0, 0, 0, 1});
  CHECK(b.positions == std::vector<int32_t>{0, 1, 2, 3, 0});
  CHECK(b.loss_mask == std::vector<float>{1, 1, 1, 0, 0});
  CHECK(s[1].w.padding_tokens == 1);
  CHECK(s[1].w.loss_tokens == 3);

  // doc3 (9 tokens) cannot fit: it is cut, overlapping by one token like continuous mode.
  CHECK(s[2].mb.tokens == std::vector<int32_t>{300, 301, 302, 303, 304});
  CHECK(s[2].mb.loss_mask == std::vector<float>{1, 1, 1, 1, 1});
  CHECK(s[3].mb.tokens == std::vector<int32_t>{305, 306, 307, 9, 9});
  CHECK(s[3].mb.segments == std::vector<int32_t>{0, 0, 0, 0, 1});
  CHECK(s[3].mb.positions == std::vector<int32_t>{0, 1, 2, 3, 0});
  CHECK(s[3].mb.loss_mask == std::vector<float>{1, 1, 1, 0, 0});

  // Counts add up: every in-document prediction once, inputs = loss + masked + padding.
  int loss = 0;
  for (const auto& x : s) {
    loss += x.w.loss_tokens;
    CHECK(int(mask_sum(x.mb)) == x.w.loss_tokens);
    int pad = 0;
    for (int j = 0; j < 5; ++j) pad += j >= x.w.used;
    CHECK(pad == x.w.padding_tokens);
  }
  CHECK(loss == 2 + 1 + 3 + 8 + 0);
}

TEST_CASE("empty documents are skipped and an exhausted stream makes no window") {
  const Docs docs{{0, 4, 0}};
  Window w;
  auto len = [&](int64_t d) { return docs.lengths[size_t(d)]; };
  next_window(len, 3, {}, 3, false, w);
  CHECK(w.complete);
  CHECK(w.pieces.size() == 1);
  CHECK(w.pieces[0].doc == 1);
  next_window(len, 3, w.next, 3, false, w);
  CHECK_FALSE(w.complete);
  next_window(len, 3, {0, 0}, 3, true, w);
  CHECK(w.complete);
  CHECK(w.next.doc == 3);
  next_window(len, 3, w.next, 3, true, w);
  CHECK_FALSE(w.complete);
}
