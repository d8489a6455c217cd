// The exp-bound row loops of the softmax (attention) and the cross-entropy (forward,
// backward, and a vocabulary shard's), in the widest variant the process's ISA allows
// (kernels/cpu/isa.h): 8 lanes (AVX2) or 16 (AVX-512).
//
// Both variants agree bit for bit (test/kernels/isa_exp_rows_test.cpp): every element's
// exp is vec_formulas.h's formula on the same inputs, and every reduction (the row's max,
// the sum of exps) runs in one 8-lane accumulator over the row's 8-element chunks in
// order, the 16-lane code adding a vector's low half and then its high half, then the
// same horizontal reduction. So the choice changes speed, never a result.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

// The max of row[0..n) and the sum of exp(row[j] - max): the two passes of a
// log-sum-exp (lse = max + log(sum)). Cross-entropy and its vocabulary-parallel
// partials both call this, so one shard's partials reproduce the unsharded loss bit
// for bit. n >= 1.
struct MaxSumExp {
  float max;
  float sum;
};
MaxSumExp max_sum_exp(const float* row, int n);

// d[j] = w * exp(x[j] - shift), j < n (d may be x): the cross-entropy's gradient
// before the target's -w.
void scaled_exp(float* d, const float* x, float shift, float w, int n);

// Softmax of one attention row: p[i] = exp(scale * (s[i] - max)) / sum, i in [0, n),
// n >= 1 (p may be s).
void softmax_row(float* p, const float* s, int n, float scale);

// The variants, for the test that compares them (the *_avx512 ones only when
// cpu_has_avx512(); exp_rows_avx512.cpp is compiled for AVX-512 alone).
MaxSumExp max_sum_exp_avx2(const float* row, int n);
MaxSumExp max_sum_exp_avx512(const float* row, int n);
void scaled_exp_avx2(float* d, const float* x, float shift, float w, int n);
void scaled_exp_avx512(float* d, const float* x, float shift, float w, int n);
void softmax_row_avx2(float* p, const float* s, int n, float scale);
void softmax_row_avx512(float* p, const float* s, int n, float scale);

}  // namespace troupe::kernels::cpu
