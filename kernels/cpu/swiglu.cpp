// SwiGLU's activation (Llama's MLP): out = silu(gate) * up, silu(g) = g / (1 + exp(-g)),
// and its backward. Elementwise, 8 lanes with masked tails through exp8 (vec_math.h), so
// an element's bits depend on its inputs only, never on the thread count or its place.
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {
namespace {

constexpr int64_t kMinChunk = 4096;

// 1 / (1 + exp(-g)) and g / (1 + exp(-g)) for 8 lanes (exp8 clamps its argument, so
// both stay finite: sigmoid -> 0 and silu -> -0 for very negative g).
struct Silu8 {
  __m256 sigmoid, silu;
};
inline Silu8 silu8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 den = _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
  return {_mm256_div_ps(one, den), _mm256_div_ps(g, den)};
}

}  // namespace

// out[n] = silu(gate[n]) * up[n]
void swiglu_forward(ThreadPool& pool, float* out, const float* gate, const float* up, int64_t n) {
  pool.parallel_for(n, kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += 8) {
      const Silu8 s = silu8(load_partial(gate + i, e - i));
      store_partial(out + i, _mm256_mul_ps(s.silu, load_partial(up + i, e - i)), e - i);
    }
  });
}

// dgate = dout * up * silu'(gate), silu'(g) = sigmoid + silu (1 - sigmoid);
// dup = dout * silu(gate). Every input is loaded before either store (dgate may alias
// gate, dup may alias up).
void swiglu_backward(ThreadPool& pool, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  pool.parallel_for(n, kMinChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += 8) {
      const int64_t m = e - i;
      const __m256 d = load_partial(dout + i, m), u = load_partial(up + i, m);
      const Silu8 s = silu8(load_partial(gate + i, m));
      const __m256 grad = _mm256_fmadd_ps(s.silu, _mm256_sub_ps(one, s.sigmoid), s.sigmoid);
      store_partial(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, u), grad), m);
      store_partial(dup + i, _mm256_mul_ps(d, s.silu), m);
    }
  });
}

}  // namespace troupe::kernels::cpu
