// Deterministic column sums (bias gradients, and the second stage of the LayerNorm
// parameter gradients): rows are cut into chunks of kColumnChunkRows; block (x, k)
// sums chunk k of 32 columns with 8 row lanes (lane y takes rows y, y + 8, ...),
// then adds its 8 lanes in order; a second kernel adds the chunks in order. The
// tree depends on N and C only.
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

struct BiasLoader {
  const float* dout;
  int C;
  __device__ float operator()(int64_t n, int c) const { return dout[n * C + c]; }
};

__global__ void bias_chunks(float* scratch, BiasLoader load, int N, int C) {
  column_chunk_sum(scratch, load, N, C);
}

}  // namespace

int64_t column_reduce_scratch(int N, int C) {
  return int64_t((N + kColumnChunkRows - 1) / kColumnChunkRows) * C;
}

void bias_backward(float* dbias, const float* dout, int N, int OC, float* scratch, cudaStream_t s) {
  if (N <= 0 || OC <= 0) return;
  const int chunks = (N + kColumnChunkRows - 1) / kColumnChunkRows;
  bias_chunks<<<dim3((OC + 31) / 32, chunks), dim3(32, kColumnLanes), 0, s>>>(scratch, BiasLoader{dout, OC}, N, OC);
  TROUPE_CUDA_LAUNCHED();
  column_chunks_finish(dbias, scratch, chunks, OC, s);
}

namespace {
__global__ void finish_chunks(float* dst, const float* scratch, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int k = 0; k < chunks; ++k) acc += scratch[int64_t(k) * C + c];
  dst[c] += acc;
}
}  // namespace

void column_chunks_finish(float* dst, const float* scratch, int chunks, int C, cudaStream_t s) {
  finish_chunks<<<(C + 255) / 256, 256, 0, s>>>(dst, scratch, chunks, C);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::kernels::cuda::launch
