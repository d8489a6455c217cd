// Causal self-attention with a per-document mask (multi-head: gqa_attention.cpp), and the
// row softmax's backward (the forward's row is exp_rows.h's softmax_row).
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

void softmax_row_backward(float* ds, const float* p, const float* dp, int n) {
  const __m256 s = _mm256_set1_ps(dot(p, dp, n));
  for (int i = 0; i < n; i += 8)
    store_partial(ds + i, _mm256_mul_ps(load_partial(p + i, n - i), _mm256_sub_ps(load_partial(dp + i, n - i), s)), n - i);
}

// Multi-head attention is grouped-query attention with one query head a group
// (gqa_attention.cpp): qkv[B, T, 3C] is q, k, v of NH heads of C / NH each.
void attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att,
                       const float* qkv, const int32_t* doc_start, int B, int T, int C, int NH,
                       const DropoutMask& drop) {
  gqa_attention_forward(pool, scratch, out, att, qkv, doc_start, B, T, NH, NH, C / NH, drop);
}

void attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout,
                        const float* qkv, const float* att, const int32_t* doc_start, int B,
                        int T, int C, int NH, const DropoutMask& drop) {
  gqa_attention_backward(pool, scratch, dqkv, dout, qkv, att, doc_start, B, T, NH, NH, C / NH, drop);
}

}  // namespace troupe::kernels::cpu
