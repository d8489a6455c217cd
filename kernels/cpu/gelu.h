// The tanh-approximation GELU over a contiguous span, forward and backward, in the
// widest variant the process's ISA allows (kernels/cpu/isa.h): 8 lanes (AVX2) or 16
// (AVX-512). Both run the same operations on every element in the same order (the
// formulas of vec_math.h's gelu8 / gelu_grad8; a tail goes through the same code
// under a mask), so the two variants agree bit for bit (test_kernels checks it,
// test/kernels/isa_gelu_test.cpp): the choice changes speed, never a result.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

// y[i] = gelu(x[i]) for i < n; y may be x.
void gelu_span(float* y, const float* x, int64_t n);

// dx[i] = dy[i] * gelu'(x[i]) for i < n; dx may be dy.
void gelu_backward_span(float* dx, const float* dy, const float* x, int64_t n);

// The AVX-512 variants (gelu_avx512.cpp, compiled for AVX-512 alone): call only when
// cpu_has_avx512(). gelu_span dispatches to them when active_isa() is AVX-512.
void gelu_span_avx512(float* y, const float* x, int64_t n);
void gelu_backward_span_avx512(float* dx, const float* dy, const float* x, int64_t n);

// The AVX2 variants, for the test that compares the two.
void gelu_span_avx2(float* y, const float* x, int64_t n);
void gelu_backward_span_avx2(float* dx, const float* dy, const float* x, int64_t n);

}  // namespace troupe::kernels::cpu
