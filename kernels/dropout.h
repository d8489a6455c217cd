// Dropout masks from a counter-based generator (docs/compute.md, "Dropout").
//
// Whether an element is kept is a pure function of where it is in the run, never of
// a generator's state: Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011) of
//   key     = dropout_key(seed, layer, site), then per attention head head_key(key, h)
//   counter = {column / 4, position, slot low 32 bits, slot high 32 bits}
// and the word column % 4 of its output. `slot` is the row's sample slot in the run's
// order (data::Microbatch::first_slot + row), `position` the row's token index
// [0, T), `column` the global column of the tensor (a hidden site) or the key index
// (attention probabilities, counter position = the query index). None of these depend
// on the layout (DP, PP, TP, SP, microbatching), on restarts or on recomputation, so
// every one of them draws the same mask.
//
// An element is dropped when its 32-bit word u < threshold = p 2^32 (rounded down),
// and a kept one is multiplied by scale = 1 / (1 - p) (rounded to float once), so the
// expected value is unchanged (inverted dropout, as Megatron and PyTorch apply it).
//
// This header is plain C++ usable from host code and, with TROUPE_HD, from CUDA
// kernels (kernels/cuda), so the CPU and the GPU draw the same bits.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__ __forceinline__
#else
#define TROUPE_HD inline
#endif

namespace troupe::kernels {

// Where in the model a mask is drawn (a part of its key).
enum class DropoutSite : uint32_t {
  kEmbedding = 1,        // the embedding's output (hidden_dropout)
  kAttentionProbs = 2,   // the attention probabilities (attention_dropout)
  kAttentionOutput = 3,  // the attention's output projection, before the residual add (hidden_dropout)
  kMlpOutput = 4,        // the MLP's output projection, before the residual add (hidden_dropout)
};

// One call's mask. p == 0: no dropout (the kernel runs exactly as without a mask).
struct DropoutMask {
  float p = 0;             // probability of dropping an element, [0, 1)
  uint32_t threshold = 0;  // floor(p 2^32): u < threshold is dropped
  float scale = 1;         // 1 / (1 - p)
  uint64_t key = 0;        // dropout_key(...) of the site
  int64_t first_slot = 0;  // sample slot of microbatch row 0; row b is first_slot + b
  // Hidden sites: the global column of local column 0 (always 0: the residual stream is
  // never split by columns). Attention: the global index of this rank's first head.
  int32_t first_col = 0;
  TROUPE_HD bool on() const { return threshold != 0; }
};

struct Philox4 {
  uint32_t v[4];
};

TROUPE_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c0;
    const uint64_t p1 = uint64_t(kM1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// SplitMix64's finalizer: a bijective mix of 64 bits.
TROUPE_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of a site: the run's seed, the global layer index (0 for the embedding) and
// the site.
TROUPE_HD uint64_t dropout_key(uint64_t seed, int layer, DropoutSite site) {
  return mix64(mix64(seed ^ 0x64726F706F757421ull) ^ (uint64_t(uint32_t(layer)) << 8) ^ uint64_t(site));
}

// The key of one attention head (global head index) of an attention-probability site.
TROUPE_HD uint64_t head_key(uint64_t key, int head) { return mix64(key + 0x9E3779B97F4A7C15ull * uint64_t(head + 1)); }

// The four words of counter block `column / 4` of (key, slot, position).
TROUPE_HD Philox4 dropout_block(uint64_t key, int64_t slot, int position, int column_block) {
  return philox4x32_10(uint32_t(column_block), uint32_t(position), uint32_t(uint64_t(slot)),
                       uint32_t(uint64_t(slot) >> 32), uint32_t(key), uint32_t(key >> 32));
}

// Whether (key, slot, position, column) is kept (one element; kernels that walk a row
// draw dropout_block once per four columns instead).
TROUPE_HD bool dropout_keep(const DropoutMask& m, uint64_t key, int64_t slot, int position, int column) {
  return dropout_block(key, slot, position, column >> 2).v[column & 3] >= m.threshold;
}

// The mask of probability p for `key` (p == 0: off). p must lie in [0, 1).
inline DropoutMask make_dropout_mask(float p, uint64_t key, int64_t first_slot, int32_t first_col) {
  DropoutMask m;
  if (!(p > 0.0f)) return m;
  m.p = p;
  const double t = double(p) * 4294967296.0;
  m.threshold = t >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(t);
  if (m.threshold == 0) m.threshold = 1;  // a p too small to express still drops something: never silently off
  m.scale = float(1.0 / (1.0 - double(p)));
  m.key = key;
  m.first_slot = first_slot;
  m.first_col = first_col;
  return m;
}

}  // namespace troupe::kernels
