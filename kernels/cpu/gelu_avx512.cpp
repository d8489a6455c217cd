// GELU spans with 16 lanes (kernels/cpu/gelu.h). Compiled for AVX-512 alone. The
// formulas are vec_formulas.h's, the ones vec_math.h's gelu8 / gelu_grad8 run on 8
// lanes, so an element's bits are the same in both variants.
#include <immintrin.h>

#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/vec_formulas.h"

namespace troupe::kernels::cpu {

void gelu_span_avx512(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, formulas::gelu<Avx512Lanes>(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_backward_span_avx512(float* dx, const float* dy, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 g = formulas::gelu_grad<Avx512Lanes>(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

}  // namespace troupe::kernels::cpu
