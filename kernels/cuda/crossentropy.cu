// Cross-entropy over the valid vocabulary columns of padded logits, with a loss mask,
// split into vocabulary-parallel pieces: per-shard (max, sum of exp, target logit)
// partials, then a combine over shards. The single-device loss is the one-shard case.
// Block reductions have a fixed tree (device_math.cuh).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kThreads = 256;

// One block per row; partials[0, n] = max, [1, n] = sum exp(l - max), [2, n] = target logit.
__global__ void ce_partials(float* partials, const float* logits, const int32_t* targets, const float* mask, int N,
                            int V, int ld, int vocab_begin) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  if (mask[n] == 0.0f) {
    if (threadIdx.x == 0) partials[n] = partials[N + n] = partials[2 * int64_t(N) + n] = 0.0f;
    return;
  }
  const float* l = logits + int64_t(n) * ld;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, l[j]);
  m = block_max(m, shared);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(l[j] - m);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const int t = targets[n] - vocab_begin;
    partials[n] = m;
    partials[N + n] = sum;
    partials[2 * int64_t(N) + n] = (t >= 0 && t < V) ? l[t] : 0.0f;
  }
}

__global__ void ce_combine(float* losses, float* lse, const float* partials, int S, const float* mask, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  if (mask[n] == 0.0f) {
    losses[n] = 0.0f;
    lse[n] = 0.0f;
    return;
  }
  float M = -INFINITY;
  for (int s = 0; s < S; ++s) M = fmaxf(M, partials[int64_t(s) * 3 * N + n]);
  float sum = 0.0f, target = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float* p = partials + int64_t(s) * 3 * N;
    sum += p[N + n] * expf(p[n] - M);
    target += p[2 * int64_t(N) + n];
  }
  const float l = M + logf(sum);
  lse[n] = l;
  losses[n] = mask[n] * (l - target);
}

__global__ void ce_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            const float* mask, float scale, int N, int V, int ld, int vocab_begin) {
  const int64_t total = int64_t(N) * ld;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / ld;
    const int j = int(i % ld);
    const float w = mask[n] * scale;
    float d = 0.0f;
    if (j < V && w != 0.0f) {
      d = w * expf(logits[i] - lse[n]);
      if (j + vocab_begin == targets[n]) d -= w;
    }
    dlogits[i] = d;
  }
}

}  // namespace

void crossentropy_partials(float* partials, const float* logits, const int32_t* targets, const float* mask, int N,
                           int V, int ld, int vocab_begin, cudaStream_t s) {
  if (N <= 0) return;
  ce_partials<<<N, kThreads, 0, s>>>(partials, logits, targets, mask, N, V, ld, vocab_begin);
  TROUPE_CUDA_LAUNCHED();
}

void crossentropy_combine(float* losses, float* lse, const float* partials, int S, const float* mask, int N,
                          cudaStream_t s) {
  if (N <= 0) return;
  ce_combine<<<(N + 255) / 256, 256, 0, s>>>(losses, lse, partials, S, mask, N);
  TROUPE_CUDA_LAUNCHED();
}

void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                           const float* mask, float scale, int N, int V, int ld, int vocab_begin, cudaStream_t s) {
  const int64_t total = int64_t(N) * ld;
  if (total <= 0) return;
  ce_backward<<<grid_for(total, kThreads, 65536), kThreads, 0, s>>>(dlogits, logits, lse, targets, mask, scale, N, V,
                                                                    ld, vocab_begin);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
