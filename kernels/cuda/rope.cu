// Rotary position embedding in place (Llama, rotate-half pairing): one thread per pair
// (a, b) = (x[i], x[i + hs/2]) of a head, grid-stride over N * heads * hs/2 pairs. Each
// pair is computed the same way wherever it sits, so the launch shape never matters.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

// sign +1: a' = a c - b s, b' = b c + a s;  sign -1: the transpose (rotation by -angle).
__global__ void rope_pairs(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads,
                           int hs, int64_t ld, float sign) {
  const int half = hs / 2;
  const int64_t pairs = int64_t(N) * heads * half;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < pairs; g += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(g % half);
    const int64_t nj = g / half;
    const int j = int(nj % heads);
    const int64_t n = nj / heads;
    const int64_t t = int64_t(positions[n]) * half + i;
    const float c = cos[t], s = sign * sin[t];
    float* a = x + n * ld + int64_t(j) * hs + i;
    const float av = a[0], bv = a[half];
    a[0] = av * c - bv * s;
    a[half] = bv * c + av * s;
  }
}

void rope(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
          int64_t ld, float sign, cudaStream_t s) {
  const int64_t pairs = int64_t(N) * heads * (hs / 2);
  if (pairs <= 0) return;
  rope_pairs<<<grid_for(pairs, kThreads, kMaxBlocks), kThreads, 0, s>>>(x, positions, cos, sin, N, heads, hs, ld, sign);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace

void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                  int64_t ld, cudaStream_t s) {
  rope(x, positions, cos, sin, N, heads, hs, ld, 1.0f, s);
}

void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                   int64_t ld, cudaStream_t s) {
  rope(dx, positions, cos, sin, N, heads, hs, ld, -1.0f, s);
}

}  // namespace troupe::kernels::cuda::launch
