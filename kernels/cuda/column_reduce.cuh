// The first stage of the deterministic column reductions (see reduce.cu): one block
// of (32 columns) x (kColumnLanes row lanes) sums one chunk of kColumnChunkRows rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {

constexpr int kColumnLanes = 8;

// dst[C] += sum over chunks (in order) of scratch[chunk, C].
void column_chunks_finish(float* dst, const float* scratch, int chunks, int C, cudaStream_t s);

// Call from a kernel launched with grid ((C + 31) / 32, chunks), block (32, kColumnLanes):
// scratch[chunk, c] = sum over the chunk's rows n of load(n, c).
template <class Load>
__device__ void column_chunk_sum(float* scratch, const Load& load, int N, int C) {
  __shared__ float part[kColumnLanes][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * kColumnChunkRows;
  const int64_t r1 = r0 + kColumnChunkRows < N ? r0 + kColumnChunkRows : N;
  float acc = 0.0f;
  if (c < C)
    for (int64_t n = r0 + threadIdx.y; n < r1; n += kColumnLanes) acc += load(n, c);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = part[0][threadIdx.x];
    for (int y = 1; y < kColumnLanes; ++y) s += part[y][threadIdx.x];
    scratch[int64_t(blockIdx.y) * C + c] = s;
  }
}

}  // namespace troupe::kernels::cuda::launch
