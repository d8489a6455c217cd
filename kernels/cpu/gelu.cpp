// GELU spans: the AVX2 variant and the dispatch (kernels/cpu/gelu.h).
#include "kernels/cpu/gelu.h"

#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

void gelu_span_avx2(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) store_partial(y + i, gelu8(load_partial(x + i, n - i)), n - i);
}

void gelu_backward_span_avx2(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    store_partial(dx + i, _mm256_mul_ps(load_partial(dy + i, n - i), gelu_grad8(load_partial(x + i, n - i))), n - i);
}

namespace {
bool wide() {
  static const bool avx512 = active_isa() == Isa::kAvx512;
  return avx512;
}
}  // namespace

void gelu_span(float* y, const float* x, int64_t n) {
  if (wide()) return gelu_span_avx512(y, x, n);
  gelu_span_avx2(y, x, n);
}

void gelu_backward_span(float* dx, const float* dy, const float* x, int64_t n) {
  if (wide()) return gelu_backward_span_avx512(dx, dy, x, n);
  gelu_backward_span_avx2(dx, dy, x, n);
}

}  // namespace troupe::kernels::cpu
