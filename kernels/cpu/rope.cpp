// Rotary position embedding (Llama, Hugging Face's rotate-half pairing), in place.
// Rows go to one participant each and every pair is rotated by the same 8-wide code
// (masked tails for hs/2 < 8 or not a multiple of 8), so the bits do not depend on the
// thread count or on where a head sits in the row.
#include <stdexcept>
#include <string>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {
namespace {

// Rotates every head of one row by the angles of position p: with c = cos[p, i],
// s = sign * sin[p, i] (sign -1 for the backward, the transpose of the rotation),
//   a' = a c - b s,  b' = b c + a s,  (a, b) = (x[i], x[i + hs/2]).
void rotate_row(float* x, const float* cos_row, const float* sin_row, int heads, int hs, float sign) {
  const int half = hs / 2;
  const __m256 sg = _mm256_set1_ps(sign);
  for (int j = 0; j < heads; ++j) {
    float* a = x + int64_t(j) * hs;
    float* b = a + half;
    for (int i = 0; i < half; i += 8) {
      const int64_t n = half - i;
      const __m256 c = load_partial(cos_row + i, n), s = _mm256_mul_ps(sg, load_partial(sin_row + i, n));
      const __m256 av = load_partial(a + i, n), bv = load_partial(b + i, n);
      store_partial(a + i, _mm256_fnmadd_ps(bv, s, _mm256_mul_ps(av, c)), n);
      store_partial(b + i, _mm256_fmadd_ps(av, s, _mm256_mul_ps(bv, c)), n);
    }
  }
}

void rope(ThreadPool& pool, float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads,
          int hs, int64_t ld, float sign) {
  if (hs % 2 != 0) throw std::invalid_argument("rope: head size " + std::to_string(hs) + " is odd");
  const int64_t half = hs / 2;
  pool.parallel_for(N, 16, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const int64_t p = positions[n];
      rotate_row(x + n * ld, cos + p * half, sin + p * half, heads, hs, sign);
    }
  });
}

}  // namespace

// x[N, ld]: heads [0, heads) of size hs from column 0; cos, sin [max_positions, hs/2].
void rope_forward(ThreadPool& pool, float* x, const int32_t* positions, const float* cos, const float* sin, int N,
                  int heads, int hs, int64_t ld) {
  rope(pool, x, positions, cos, sin, N, heads, hs, ld, 1.0f);
}

// The transpose of the rotation: da = da' c + db' s, db = db' c - da' s.
void rope_backward(ThreadPool& pool, float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                   int heads, int hs, int64_t ld) {
  rope(pool, dx, positions, cos, sin, N, heads, hs, ld, -1.0f);
}

}  // namespace troupe::kernels::cpu
