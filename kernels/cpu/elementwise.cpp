// Elementwise kernels: GELU, add, scale. Chunks of 4096 elements per participant at least.
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {
namespace {
constexpr int64_t kMinChunk = 4096;
}

void gelu_forward(ThreadPool& pool, float* out, const float* inp, int64_t n) {
  pool.parallel_for(n, kMinChunk, [&](int64_t b, int64_t e) { gelu_span(out + b, inp + b, e - b); });
}

void gelu_backward(ThreadPool& pool, float* dinp, const float* inp, const float* dout, int64_t n) {
  pool.parallel_for(n, kMinChunk, [&](int64_t b, int64_t e) { gelu_backward_span(dinp + b, dout + b, inp + b, e - b); });
}

void add(ThreadPool& pool, float* out, const float* a, const float* b, int64_t n) {
  pool.parallel_for(n, kMinChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i += 8)
      store_partial(out + i, _mm256_add_ps(load_partial(a + i, hi - i), load_partial(b + i, hi - i)), hi - i);
  });
}

void scale(ThreadPool& pool, float* x, int64_t n, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  pool.parallel_for(n, kMinChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i += 8) store_partial(x + i, _mm256_mul_ps(load_partial(x + i, hi - i), sv), hi - i);
  });
}

}  // namespace troupe::kernels::cpu
