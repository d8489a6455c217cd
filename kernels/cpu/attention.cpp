// Causal self-attention with a per-document mask, and the row softmax it uses.
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec_math.h"

namespace troupe::kernels::cpu {

void softmax_row(float* p, const float* s, int n, float scale) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (int i = 0; i < n; i += 8) {
    __m256 v = load_partial(s + i, n - i);
    if (n - i < 8) v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, _mm256_castsi256_ps(tail_mask(n - i)));
    mx = _mm256_max_ps(mx, v);
  }
  const float m = hmax8(mx);
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_mul_ps(_mm256_sub_ps(load_partial(s + i, n - i), mv), sv));
    if (n - i < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(n - i)));
    acc = _mm256_add_ps(acc, e);
    store_partial(p + i, e, n - i);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum8(acc));
  for (int i = 0; i < n; i += 8) store_partial(p + i, _mm256_mul_ps(load_partial(p + i, n - i), inv), n - i);
}

void softmax_row_backward(float* ds, const float* p, const float* dp, int n) {
  const __m256 s = _mm256_set1_ps(dot(p, dp, n));
  for (int i = 0; i < n; i += 8)
    store_partial(ds + i, _mm256_mul_ps(load_partial(p + i, n - i), _mm256_sub_ps(load_partial(dp + i, n - i), s)), n - i);
}

namespace {

struct Dims {
  int B, T, C, NH, hs;
  int64_t C3;
  float scale;
  Dims(int b, int t, int c, int nh) : B(b), T(t), C(c), NH(nh), hs(c / nh), C3(3 * int64_t(c)), scale(1.0f / std::sqrt(float(c / nh))) {}
};

// Runs f(b, h, participant) for every (batch row, head) pair; pairs are split
// statically over participants and never share an output element.
template <class F>
void for_each_head(ThreadPool& pool, Scratch& scratch, int B, int NH, int T, F&& f) {
  scratch.per_thread.resize(size_t(pool.size()));
  for (int p = 0; p < pool.size(); ++p) scratch.thread_floats(p, size_t(2 * T));
  const int64_t pairs = int64_t(B) * NH;
  pool.run([&](int p) {
    auto [b, e] = ThreadPool::chunk(pairs, p, pool.size());
    for (int64_t i = b; i < e; ++i) f(int(i / NH), int(i % NH), p);
  });
}

}  // namespace

// For token t of row b, head h: att[b,h,t,s] = softmax_s(q_t . k_s / sqrt(hs)) over
// s in [doc_start(t), t]; out[b,t,h] = sum_s att * v_s.
void attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att,
                       const float* qkv, const int32_t* doc_start, int B, int T, int C, int NH) {
  const Dims d(B, T, C, NH);
  for_each_head(pool, scratch, B, NH, T, [&](int b, int h, int p) {
    float* sc = scratch.per_thread[size_t(p)].data();
    for (int t = 0; t < T; ++t) {
      const int64_t row = int64_t(b) * T + t;
      const int s0 = doc_start[row];
      const int n = t - s0 + 1;
      const float* q = qkv + row * d.C3 + int64_t(h) * d.hs;
      for (int s = s0; s <= t; ++s)
        sc[s - s0] = dot(q, qkv + (int64_t(b) * T + s) * d.C3 + C + int64_t(h) * d.hs, d.hs);
      float* a = att + ((int64_t(b) * NH + h) * T + t) * T + s0;
      softmax_row(a, sc, n, d.scale);
      float* o = out + row * C + int64_t(h) * d.hs;
      std::memset(o, 0, sizeof(float) * size_t(d.hs));
      for (int s = s0; s <= t; ++s)
        axpy(o, a[s - s0], qkv + (int64_t(b) * T + s) * d.C3 + 2 * int64_t(C) + int64_t(h) * d.hs, d.hs);
    }
  });
}

// Backward of the above. Per (b, h) and query t in order:
//   dp_s = dout_t . v_s;  dv_s += att_ts dout_t;  ds = softmax backward of dp;
//   dq_t += scale sum_s ds_s k_s;  dk_s += scale ds_s q_t.
void attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout,
                        const float* qkv, const float* att, const int32_t* doc_start, int B,
                        int T, int C, int NH) {
  const Dims d(B, T, C, NH);
  for_each_head(pool, scratch, B, NH, T, [&](int b, int h, int p) {
    float* dp = scratch.per_thread[size_t(p)].data();
    const int64_t hoff = int64_t(h) * d.hs;
    for (int t = 0; t < T; ++t)
      for (int part = 0; part < 3; ++part)
        std::memset(dqkv + (int64_t(b) * T + t) * d.C3 + part * int64_t(C) + hoff, 0, sizeof(float) * size_t(d.hs));
    for (int t = 0; t < T; ++t) {
      const int64_t row = int64_t(b) * T + t;
      const int s0 = doc_start[row];
      const int n = t - s0 + 1;
      const float* a = att + ((int64_t(b) * NH + h) * T + t) * T + s0;
      const float* g = dout + row * C + hoff;
      const float* q = qkv + row * d.C3 + hoff;
      float* dq = dqkv + row * d.C3 + hoff;
      for (int s = s0; s <= t; ++s) {
        const int64_t srow = (int64_t(b) * T + s) * d.C3;
        dp[s - s0] = dot(g, qkv + srow + 2 * int64_t(C) + hoff, d.hs);
        axpy(dqkv + srow + 2 * int64_t(C) + hoff, a[s - s0], g, d.hs);
      }
      softmax_row_backward(dp, a, dp, n);
      for (int s = s0; s <= t; ++s) {
        const int64_t srow = (int64_t(b) * T + s) * d.C3;
        const float ds = d.scale * dp[s - s0];
        axpy(dq, ds, qkv + srow + C + hoff, d.hs);
        axpy(dqkv + srow + C + hoff, ds, q, d.hs);
      }
    }
  });
}

}  // namespace troupe::kernels::cpu
