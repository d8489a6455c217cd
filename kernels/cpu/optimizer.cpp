// AdamW step and the sum of squares behind the global gradient norm.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

namespace {

// AdamW on [lo, hi): the one spelling of the update, which adamw_update and
// adamw_update_norms both call. Its three fused multiply-adds are written out (the ones
// the compiler chose for the loop this replaces, so its numbers stay): left to
// -ffp-contract, which products get fused depends on the code around them, and the two
// callers would not be guaranteed the same bits. Rounded apart: g, c2 * g^2, b1 * m and
// lr * u; fused: m = fma(c1, g, b1 m), v = fma(b2, v, c2 g^2), p = p decay - lr u, and
// decay = 1 - lr wd. `seen(before, after, k)` is handed each 8-lane group's weights before
// and after the update (k: the lanes that hold elements, up to 8; the others hold zeros in
// `before` and whatever the padding computed in `after`); it cannot touch the update's bits.
template <class Seen>
void adamw_range(float* param, const float* grad, float* m, float* v, int64_t lo, int64_t hi, const AdamWArgs& a,
                 Seen&& seen) {
  const __m256 b1 = _mm256_set1_ps(a.beta1), b2 = _mm256_set1_ps(a.beta2);
  const __m256 c1 = _mm256_set1_ps(1.0f - a.beta1), c2 = _mm256_set1_ps(1.0f - a.beta2);
  const __m256 gs = _mm256_set1_ps(a.grad_scale), lr = _mm256_set1_ps(a.lr);
  const __m256 bc1 = _mm256_set1_ps(a.bias_correction1), bc2 = _mm256_set1_ps(a.bias_correction2);
  const __m256 eps = _mm256_set1_ps(a.eps), decay = _mm256_set1_ps(std::fma(-a.lr, a.weight_decay, 1.0f));
  for (int64_t i = lo; i < hi; i += 8) {
    const int64_t k = hi - i;
    const __m256 g = _mm256_mul_ps(load_partial(grad + i, k), gs);
    const __m256 mi = _mm256_fmadd_ps(c1, g, _mm256_mul_ps(b1, load_partial(m + i, k)));
    const __m256 vi = _mm256_fmadd_ps(b2, load_partial(v + i, k), _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    const __m256 mhat = _mm256_div_ps(mi, bc1);
    const __m256 vhat = _mm256_div_ps(vi, bc2);
    const __m256 u = _mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps));
    const __m256 before = load_partial(param + i, k);
    const __m256 p = _mm256_fmsub_ps(before, decay, _mm256_mul_ps(lr, u));
    store_partial(m + i, mi, k);
    store_partial(v + i, vi, k);
    store_partial(param + i, p, k);
    seen(before, p, k);
  }
}

}  // namespace

void adamw_update(ThreadPool& pool, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWArgs& a) {
  // At least 64Ki elements a thread: waking a sleeping worker costs tens of
  // microseconds, as much as updating some 30Ki elements.
  pool.parallel_for(n, 65536,
                    [&](int64_t lo, int64_t hi) { adamw_range(param, grad, m, v, lo, hi, a, [](__m256, __m256, int64_t) {}); });
}

namespace {
constexpr int64_t kSumBlock = int64_t(1) << 16;

// (a + b) added lane by lane, then its four lanes as (0 + 1) + (2 + 3): how every
// double accumulator pair of this file is reduced.
double sum_pair(__m256d a, __m256d b) {
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a, b));
  return (t[0] + t[1]) + (t[2] + t[3]);
}

// The sum of squares of the block x[0, n), its lanes into two accumulators in element
// order. With kSplit, in the same loop, the sums of the block's segments, cut at the k
// offsets cuts[0..k) (of the whole, the block being at offset `base`; strictly inside
// the block, ascending): [0, cuts[0] - base), ..., [cuts[k-1] - base, n), into
// segments[0..k]; a vector that a cut splits adds its lanes on either side of the cut to
// either segment (masked), so each element counts once. The block's own sum is the same
// either way (the same lanes, accumulators and order: its bits).
template <bool kSplit>
double block_sum_squares(const float* x, int64_t n, int64_t base = 0, const int64_t* cuts = nullptr, int64_t k = 0,
                         double* segments = nullptr) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  // The lanes of a vector at i below a cut: a mask for each half (4 doubles).
  const __m256i lanes_lo = _mm256_setr_epi64x(0, 1, 2, 3), lanes_hi = _mm256_setr_epi64x(4, 5, 6, 7);
  int64_t next = 0;  // the next cut
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = load_partial(x + i, n - i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
    if constexpr (kSplit) {
      while (next < k && cuts[next] - base < i + 8) {
        const __m256i at = _mm256_set1_epi64x(cuts[next] - base - i);
        const __m256d before_lo = _mm256_castsi256_pd(_mm256_cmpgt_epi64(at, lanes_lo));
        const __m256d before_hi = _mm256_castsi256_pd(_mm256_cmpgt_epi64(at, lanes_hi));
        const __m256d b_lo = _mm256_and_pd(lo, before_lo), b_hi = _mm256_and_pd(hi, before_hi);
        segments[next++] = sum_pair(_mm256_fmadd_pd(b_lo, b_lo, s0), _mm256_fmadd_pd(b_hi, b_hi, s1));
        s0 = s1 = _mm256_setzero_pd();
        lo = _mm256_andnot_pd(before_lo, lo);  // what is left for the segments after the cut
        hi = _mm256_andnot_pd(before_hi, hi);
      }
      s0 = _mm256_fmadd_pd(lo, lo, s0);
      s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
  }
  if constexpr (kSplit) segments[k] = sum_pair(s0, s1);
  return sum_pair(a0, a1);
}
}  // namespace

// Squares are exact in double (a float times a float fits in 53 bits); block sums are
// added in block order, so the result depends on n and x only.
double sum_squares(ThreadPool& pool, Scratch& scratch, const float* x, int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (scratch.partials.size() < size_t(blocks)) scratch.partials.resize(size_t(blocks));
  double* part = scratch.partials.data();
  pool.parallel_for(blocks, 2, [&](int64_t b, int64_t e) {  // 128Ki elements a thread at least
    for (int64_t i = b; i < e; ++i) part[i] = block_sum_squares<false>(x + i * kSumBlock, std::min(kSumBlock, n - i * kSumBlock));
  });
  double total = 0;
  for (int64_t i = 0; i < blocks; ++i) total += part[i];
  return total;
}

double sum_squares_split(ThreadPool& pool, Scratch& scratch, const float* x, int64_t n, const int64_t* piece_ends,
                         int64_t pieces, double* piece_sums) {
  if (pieces < 1 || piece_ends[pieces - 1] != n)
    throw std::invalid_argument("sum_squares_split: the last piece must end at n");
  for (int64_t p = 0; p < pieces; ++p)
    if (piece_ends[p] <= (p ? piece_ends[p - 1] : 0))
      throw std::invalid_argument("sum_squares_split: pieces must be non-empty and in order");
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  // Block b: its first piece (first[2b]) and the index of its first segment (first[2b +
  // 1]; one segment per piece it touches); first[2 blocks + 1]: the count of segments.
  auto& first = scratch.block_pieces;
  first.assign(2 * size_t(blocks) + 2, 0);
  int64_t piece = 0, segment = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kSumBlock, hi = std::min(n, lo + kSumBlock);
    while (piece_ends[piece] <= lo) ++piece;
    first[2 * size_t(b)] = piece;
    first[2 * size_t(b) + 1] = segment;
    int64_t last = piece;
    while (piece_ends[last] < hi) ++last;
    segment += last - piece + 1;
  }
  first[2 * size_t(blocks) + 1] = segment;
  if (scratch.partials.size() < size_t(blocks)) scratch.partials.resize(size_t(blocks));
  if (scratch.piece_partials.size() < size_t(segment)) scratch.piece_partials.resize(size_t(segment));
  double* part = scratch.partials.data();
  double* seg = scratch.piece_partials.data();
  pool.parallel_for(blocks, 2, [&](int64_t b, int64_t e) {  // as sum_squares: 128Ki elements a thread at least
    for (int64_t i = b; i < e; ++i) {
      const int64_t lo = i * kSumBlock, len = std::min(kSumBlock, n - lo);
      const int64_t* cuts = piece_ends + first[2 * size_t(i)];  // those below lo + len are inside the block
      int64_t k = 0;
      while (cuts[k] < lo + len) ++k;
      part[i] = block_sum_squares<true>(x + lo, len, lo, cuts, k, seg + first[2 * size_t(i) + 1]);
    }
  });
  double total = 0;
  for (int64_t i = 0; i < blocks; ++i) total += part[i];
  std::fill(piece_sums, piece_sums + pieces, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t s_begin = first[2 * size_t(b) + 1], s_end = first[2 * size_t(b) + 3];
    for (int64_t s = s_begin; s < s_end; ++s) piece_sums[first[2 * size_t(b)] + (s - s_begin)] += seg[s];
  }
  return total;
}

namespace {

// AdamW on [lo, hi) (one block of adamw_update_norms) with its two sums taken in the
// update's own loop from its registers, in double (the difference of two floats taken in
// double), in element order: part[0] the update's, part[1] the weights'. The update is
// memory-bound and the sums ride along (a second pass over each piece from L1 cost
// 1.25-1.4x the plain update; docs/performance.md).
void adamw_block_sums(float* param, const float* grad, float* m, float* v, int64_t lo, int64_t hi, const AdamWArgs& a,
                      double* part) {
  __m256d u0 = _mm256_setzero_pd(), u1 = _mm256_setzero_pd(), w0 = _mm256_setzero_pd(), w1 = _mm256_setzero_pd();
  adamw_range(param, grad, m, v, lo, hi, a, [&](__m256 old, __m256 now, int64_t k) {
    // Lanes past the end: 0 before (load_partial), and 0 after once masked, so they
    // add nothing whatever the update computed from the zero padding.
    if (k < 8) now = _mm256_and_ps(now, _mm256_castsi256_ps(tail_mask(k)));
    const __m256d o_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(old));
    const __m256d o_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(old, 1));
    const __m256d d_lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(now)), o_lo);
    const __m256d d_hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(now, 1)), o_hi);
    u0 = _mm256_fmadd_pd(d_lo, d_lo, u0);
    u1 = _mm256_fmadd_pd(d_hi, d_hi, u1);
    w0 = _mm256_fmadd_pd(o_lo, o_lo, w0);
    w1 = _mm256_fmadd_pd(o_hi, o_hi, w1);
  });
  part[0] = sum_pair(u0, u1);
  part[1] = sum_pair(w0, w1);
}

}  // namespace

void adamw_update_norms(ThreadPool& pool, Scratch& scratch, float* param, const float* grad, float* m, float* v,
                        int64_t n, const AdamWArgs& a, double* update_sq, double* weight_sq) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  if (scratch.update_partials.size() < 2 * size_t(blocks)) scratch.update_partials.resize(2 * size_t(blocks));
  double* part = scratch.update_partials.data();
  // Block by block (64 Ki elements, adamw_update's grain; one a thread at least), the
  // partials added in block order.
  pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk)
      adamw_block_sums(param, grad, m, v, blk * kSumBlock, std::min(n, (blk + 1) * kSumBlock), a, part + 2 * blk);
  });
  double du = 0, dw = 0;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    du += part[2 * blk];
    dw += part[2 * blk + 1];
  }
  *update_sq = du;
  *weight_sq = dw;
}

void adamw_update_pieces(ThreadPool& pool, Scratch& scratch, float* param, const float* grad, float* m, float* v,
                         const std::vector<AdamWPiece>& pieces, const AdamWArgs& a) {
  // The blocks of every piece, in piece order: [lo, hi) of the piece pieces[piece].
  using Block = Scratch::AdamWBlock;
  std::vector<Block>& blocks = scratch.adamw_blocks;
  blocks.clear();
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int64_t lo = pieces[i].begin; lo < pieces[i].end; lo += kSumBlock)
      blocks.push_back({i, lo, std::min(pieces[i].end, lo + kSumBlock)});
    total += pieces[i].end - pieces[i].begin;
  }
  if (scratch.update_partials.size() < 2 * blocks.size()) scratch.update_partials.resize(2 * blocks.size());
  double* part = scratch.update_partials.data();
  const int parts = int(std::max<int64_t>(1, std::min<int64_t>(pool.size(), total / kAdamWPiecesGrain)));
  // Participant p owns the elements [total p / parts, total (p + 1) / parts), counting the
  // pieces' elements in order: of a piece without sums, exactly those (the update is
  // element by element); of a piece with sums, the blocks whose first element it owns (a
  // block's sum is one participant's loop).
  auto body = [&](int p) {
    if (p >= parts) return;
    const int64_t from = total * p / parts, to = total * (p + 1) / parts;
    AdamWArgs args = a;
    int64_t at = 0;
    for (size_t k = 0; k < blocks.size(); ++k) {
      const Block& b = blocks[k];
      const int64_t start = at;
      at += b.hi - b.lo;
      if (start >= to) break;
      const AdamWPiece& piece = pieces[b.piece];
      args.weight_decay = piece.weight_decay;
      if (piece.update_sq) {
        if (start >= from)
          adamw_block_sums(param + piece.begin, grad + piece.begin, m + piece.begin, v + piece.begin,
                           b.lo - piece.begin, b.hi - piece.begin, args, part + 2 * k);
      } else if (at > from) {
        const int64_t lo = b.lo + std::max<int64_t>(0, from - start), hi = b.hi - std::max<int64_t>(0, at - to);
        adamw_range(param, grad, m, v, lo, hi, args, [](__m256, __m256, int64_t) {});
      }
    }
  };
  if (parts == 1)
    body(0);
  else
    pool.run(body);
  // A measured piece's sums: from 0, its blocks' partials in block order, as
  // adamw_update_norms adds them.
  for (size_t k = 0; k < blocks.size(); ++k) {
    const AdamWPiece& piece = pieces[blocks[k].piece];
    if (!piece.update_sq) continue;
    if (blocks[k].lo == piece.begin) *piece.update_sq = *piece.weight_sq = 0.0;
    *piece.update_sq += part[2 * k];
    *piece.weight_sq += part[2 * k + 1];
  }
}

}  // namespace troupe::kernels::cpu
