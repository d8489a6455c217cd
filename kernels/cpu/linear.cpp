// Conv1D / linear layers (weight [in, out]) with fused bias, residual and GELU.
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

// out[N, OC] = residual + inp[N, C] * weight[C, OC] + bias;  gelu_out = gelu(out).
// Each participant first writes residual + bias into its block of out, then lets
// sgemm accumulate into it (beta = 1): bias and residual add cost no extra pass over
// memory. The GELU runs on the block right after its GEMM, while it is in cache.
void linear_forward(ThreadPool& pool, float* out, float* gelu_out, const float* inp,
                    const float* weight, const float* bias, const float* residual, int N, int C,
                    int OC) {
  const bool init = bias || residual;
  auto before = [&](const GemmBlock& blk) {
    if (!init) return;
    const int w = blk.n1 - blk.n0;
    for (int r = blk.m0; r < blk.m1; ++r) {
      float* o = out + int64_t(r) * OC + blk.n0;
      const float* res = residual ? residual + int64_t(r) * OC + blk.n0 : nullptr;
      const float* bb = bias ? bias + blk.n0 : nullptr;
      for (int c = 0; c < w; c += 8) {
        __m256 v = res ? load_partial(res + c, w - c) : _mm256_setzero_ps();
        if (bb) v = _mm256_add_ps(v, load_partial(bb + c, w - c));
        store_partial(o + c, v, w - c);
      }
    }
  };
  auto after = [&](const GemmBlock& blk) {
    if (!gelu_out) return;
    const int w = blk.n1 - blk.n0;
    for (int r = blk.m0; r < blk.m1; ++r)
      gelu_span(gelu_out + int64_t(r) * OC + blk.n0, out + int64_t(r) * OC + blk.n0, w);
  };
  gemm_split(pool, false, false, N, OC, C, 1.0f, inp, C, weight, OC, init ? 1.0f : 0.0f, out, OC,
             before, after);
}

// dinp[N, C] = dout * weight^T (times gelu'(gelu_pre) when given);
// dweight[C, OC] += inp^T * dout;  dbias += column sums of dout.
void linear_backward(ThreadPool& pool, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     const float* gelu_pre, int N, int C, int OC) {
  if (dinp) {
    auto none = [](const GemmBlock&) {};
    auto after = [&](const GemmBlock& blk) {
      if (!gelu_pre) return;
      const int w = blk.n1 - blk.n0;
      for (int r = blk.m0; r < blk.m1; ++r) {
        float* g = dinp + int64_t(r) * C + blk.n0;
        gelu_backward_span(g, g, gelu_pre + int64_t(r) * C + blk.n0, w);
      }
    };
    gemm_split(pool, false, true, N, C, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, C, none, after);
  }
  if (dweight) gemm(pool, true, false, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
  if (dbias) bias_backward(pool, dbias, dout, N, OC);
}

void bias_backward(ThreadPool& pool, float* dbias, const float* dout, int N, int OC) {
  pool.parallel_for(OC, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; cb += 64) {
      const int64_t w = std::min<int64_t>(64, c1 - cb);
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int64_t n = 0; n < N; ++n) {
        const float* d = dout + n * OC + cb;
        for (int j = 0; j < 8 && j * 8 < w; ++j) acc[j] = _mm256_add_ps(acc[j], load_partial(d + j * 8, w - j * 8));
      }
      for (int j = 0; j < 8 && j * 8 < w; ++j) {
        float* g = dbias + cb + j * 8;
        store_partial(g, _mm256_add_ps(load_partial(g, w - j * 8), acc[j]), w - j * 8);
      }
    }
  });
}

}  // namespace troupe::kernels::cpu
