// Template body of for_each_overlap (ckpt/region.h).
#pragma once

#include <algorithm>

namespace troupe::ckpt {

template <class F>
void for_each_overlap(const Region& src, const Region& dst, F&& f) {
  const size_t rank = src.box.size();
  if (rank == 0 || dst.box.size() != rank) return;
  // The intersection of the two boxes, in global coordinates.
  Box common(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t lo = std::max(src.box[d].offset, dst.box[d].offset);
    const int64_t hi = std::min(src.box[d].offset + src.box[d].extent,
                                dst.box[d].offset + dst.box[d].extent);
    if (hi <= lo) return;
    common[d] = {lo, hi - lo};
  }
  const size_t last = rank - 1;
  const int64_t col_lo = common[last].offset, cols = common[last].extent;
  // Walk the rows of `common` (every combination of leading coordinates) with an
  // odometer; `g` holds the global leading coordinates of the current row.
  std::vector<int64_t> g(rank, 0);
  for (size_t d = 0; d < last; ++d) g[d] = common[d].offset;
  for (;;) {
    // Row-major index of (g, col_lo) inside each box.
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < last; ++d) {
      s = s * src.box[d].extent + (g[d] - src.box[d].offset);
      t = t * dst.box[d].extent + (g[d] - dst.box[d].offset);
    }
    s = s * src.box[last].extent + (col_lo - src.box[last].offset);
    t = t * dst.box[last].extent + (col_lo - dst.box[last].offset);
    // Rows come in increasing flat order in both boxes: past either range, done.
    if (s >= src.flat_end || t >= dst.flat_end) return;
    // Columns [0, cols) of the row sit at s + c and t + c; keep those inside both
    // flat ranges.
    const int64_t c0 = std::max({int64_t(0), src.flat_begin - s, dst.flat_begin - t});
    const int64_t c1 = std::min({cols, src.flat_end - s, dst.flat_end - t});
    if (c0 < c1) f(Overlap{s + c0 - src.flat_begin, t + c0 - dst.flat_begin, c1 - c0});
    // Next row.
    size_t d = last;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++g[d] < common[d].offset + common[d].extent) break;
      g[d] = common[d].offset;
    }
  }
}

}  // namespace troupe::ckpt
