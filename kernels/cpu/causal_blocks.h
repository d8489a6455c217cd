// The causal structure the attention kernels (gqa_attention.cpp) exploit. Query rows
// are cut into blocks of causal_block(hs) rows (the last one shorter); rows [r0, r1) see
// key columns [c0, r1) only, c0 the earliest document start among them (doc_start[t] <=
// t, the first token of t's document; nothing assumes the starts are sorted). The key columns
// are cut into the same blocks, and column block [k0, k1) is seen by rows [k0, e) only,
// e - 1 the last row whose document starts before k1. Outside those rectangles every
// pair is masked, so the products over them are the whole attention.
#pragma once

#include <algorithm>
#include <cstdint>

namespace troupe::kernels::cpu {

// Rows a block for heads of hs: small enough that the masked triangle of each diagonal
// block is little work, large enough that each product's fixed cost stays small
// beside its flops; narrow heads take larger blocks (bench/attention_bench,
// docs/performance.md: 32 rows won 1.2x on small's hs = 64 and lost 1.1x on tiny's hs = 16).
inline int causal_block(int hs) { return hs >= 32 ? 32 : 64; }

// f(r0, r1, c0) for each row block in order.
template <class F>
void for_each_row_block(const int32_t* doc_start, int T, int block, F&& f) {
  for (int r0 = 0; r0 < T; r0 += block) {
    const int r1 = std::min(T, r0 + block);
    int c0 = doc_start[r0];
    for (int t = r0 + 1; t < r1; ++t) c0 = std::min(c0, int(doc_start[t]));
    f(r0, r1, c0);
  }
}

// f(k0, k1, e) for each column block in order.
template <class F>
void for_each_column_block(const int32_t* doc_start, int T, int block, F&& f) {
  for (int k0 = 0; k0 < T; k0 += block) {
    const int k1 = std::min(T, k0 + block);
    int e = k1;  // rows [k0, k1) see their own block's columns
    for (int t = k1; t < T; ++t)
      if (doc_start[t] < k1) e = t + 1;
    f(k0, k1, e);
  }
}

}  // namespace troupe::kernels::cpu
