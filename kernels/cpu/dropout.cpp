// Dropout (kernels/dropout.h): the hidden sites' masked add over token rows, and the
// attention-probability row mask the attention kernels apply. Each element's mask
// is a function of its coordinates only, so the result does not depend on the
// partition; rows are split over participants like any row kernel.
#include "kernels/dropout.h"

#include <cstring>

#include "kernels/cpu/kernels.h"

namespace troupe::kernels::cpu {

void dropout(ThreadPool& pool, float* out, const float* in, const float* add, int64_t first_row, int64_t rows,
             int cols, int T, const DropoutMask& m) {
  pool.parallel_for(rows, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t g = first_row + r;  // token row of the microbatch's [B*T]
      const int64_t slot = m.first_slot + g / T;
      const int position = int(g % T);
      const float* x = in + r * cols;
      const float* a = add ? add + r * cols : nullptr;
      float* y = out + r * cols;
      for (int c0 = 0; c0 < cols; c0 += 4) {
        const int col = m.first_col + c0;
        const Philox4 u = dropout_block(m.key, slot, position, col >> 2);
        for (int j = 0; j < 4 && c0 + j < cols; ++j) {
          // first_col is a multiple of 4 for hidden sites (0), so word j is column c0 + j's.
          const float kept = u.v[j] >= m.threshold ? x[c0 + j] * m.scale : 0.0f;
          y[c0 + j] = a ? a[c0 + j] + kept : kept;
        }
      }
    }
  });
}

void dropout_attention_row(float* dst, const float* src, int s0, int t, int T, const DropoutMask& m, uint64_t key,
                           int64_t slot) {
  if (s0 > 0) std::memset(dst, 0, sizeof(float) * size_t(s0));
  for (int k0 = s0 & ~3; k0 <= t; k0 += 4) {
    const Philox4 u = dropout_block(key, slot, t, k0 >> 2);
    for (int j = 0; j < 4; ++j) {
      const int k = k0 + j;
      if (k < s0 || k > t) continue;
      dst[k] = u.v[j] >= m.threshold ? src[k] * m.scale : 0.0f;
    }
  }
  if (t + 1 < T) std::memset(dst + t + 1, 0, sizeof(float) * size_t(T - t - 1));
}

}  // namespace troupe::kernels::cpu
