// Token + position embedding. The backward is deterministic without atomics: the
// (row id, token index) pairs are sorted by row id with CUB's stable radix sort, so
// each distinct row's tokens stay in increasing index order; one block column per
// run of equal ids then adds the run's gradient rows in that order onto the table
// row -- the CPU kernel's summation order exactly.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda::launch {
namespace {

__global__ void embed_fwd(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                          const float* wpe, int N, int C) {
  const int64_t total = int64_t(N) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    out[i] = wte[int64_t(tokens[n]) * C + c] + wpe[int64_t(positions[n]) * C + c];
  }
}

// Vocabulary-parallel: rows of tokens outside [vocab_begin, vocab_begin + vocab_rows)
// are 0; wpe is added when given.
__global__ void embed_fwd_shard(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                                const float* wpe, int N, int C, int vocab_begin, int vocab_rows) {
  const int64_t total = int64_t(N) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int32_t row = tokens[n] - vocab_begin;
    float v = row >= 0 && row < vocab_rows ? wte[int64_t(row) * C + c] : 0.0f;
    if (wpe) v += wpe[int64_t(positions[n]) * C + c];
    out[i] = v;
  }
}

// ids[n] = the token's row in the shard, or -1 outside it (sorted first, then skipped).
__global__ void shard_rows(int32_t* ids, const int32_t* tokens, int N, int vocab_begin, int vocab_rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const int32_t row = tokens[i] - vocab_begin;
  ids[i] = row >= 0 && row < vocab_rows ? row : -1;
}

__global__ void iota(int32_t* v, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) v[i] = i;
}

constexpr int kAccThreads = 128;

// Block (i, y): if sorted position i starts a run of equal ids, columns
// [y * 128, y * 128 + 128) of that table row get the run's gradient rows added in order.
__global__ void accumulate_runs(float* table, const float* dout, const int32_t* ids, const int32_t* order, int N,
                                int C) {
  const int i = blockIdx.x;
  if (i > 0 && ids[i - 1] == ids[i]) return;
  const int c = blockIdx.y * kAccThreads + threadIdx.x;
  if (c >= C) return;
  const int32_t row = ids[i];
  if (row < 0) return;  // tokens outside a vocabulary shard
  float* dst = table + int64_t(row) * C + c;
  float acc = *dst;
  for (int j = i; j < N && ids[j] == row; ++j) acc += dout[int64_t(order[j]) * C + c];
  *dst = acc;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(int N) {
  size_t bytes = 0;
  TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), N));
  return bytes;
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                       const float* wpe, int N, int C, cudaStream_t s) {
  const int64_t total = int64_t(N) * C;
  if (total <= 0) return;
  embed_fwd<<<grid_for(total, 256, 65536), 256, 0, s>>>(out, tokens, positions, wte, wpe, N, C);
  TROUPE_CUDA_LAUNCHED();
}

void embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                             const float* wpe, int N, int C, int vocab_begin, int vocab_rows, cudaStream_t s) {
  const int64_t total = int64_t(N) * C;
  if (total <= 0) return;
  embed_fwd_shard<<<grid_for(total, 256, 65536), 256, 0, s>>>(out, tokens, positions, wte, wpe, N, C, vocab_begin,
                                                                vocab_rows);
  TROUPE_CUDA_LAUNCHED();
}

size_t embedding_backward_scratch_bytes(int N) {
  return 4 * align256(size_t(N) * sizeof(int32_t)) + align256(sort_temp_bytes(N));
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int N, int C, void* scratch, size_t scratch_bytes,
                        cudaStream_t s, int vocab_begin, int vocab_rows) {
  if (N <= 0 || C <= 0) return;
  if (scratch_bytes < embedding_backward_scratch_bytes(N))
    throw CudaError("embedding_backward: scratch of " + std::to_string(scratch_bytes) + " bytes is too small");
  char* p = static_cast<char*>(scratch);
  const size_t ints = align256(size_t(N) * sizeof(int32_t));
  auto* sorted_ids = reinterpret_cast<int32_t*>(p);
  auto* index = reinterpret_cast<int32_t*>(p + ints);
  auto* order = reinterpret_cast<int32_t*>(p + 2 * ints);
  auto* rows = reinterpret_cast<int32_t*>(p + 3 * ints);
  void* temp = p + 4 * ints;
  size_t temp_bytes = scratch_bytes - 4 * ints;
  iota<<<(N + 255) / 256, 256, 0, s>>>(index, N);
  TROUPE_CUDA_LAUNCHED();
  const int32_t* wte_ids = tokens;
  if (vocab_rows >= 0) {  // a vocabulary shard: tokens become shard rows, or -1
    shard_rows<<<(N + 255) / 256, 256, 0, s>>>(rows, tokens, N, vocab_begin, vocab_rows);
    TROUPE_CUDA_LAUNCHED();
    wte_ids = rows;
  }
  const dim3 grid(unsigned(N), unsigned((C + kAccThreads - 1) / kAccThreads));
  const struct {
    float* table;
    const int32_t* ids;
  } parts[2] = {{dwte, wte_ids}, {dwpe, positions}};
  for (const auto& part : parts) {
    if (!part.table) continue;  // a shard without wpe
    TROUPE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, part.ids, sorted_ids, index, order, N, 0,
                                                      int(sizeof(int32_t) * 8), s));
    accumulate_runs<<<grid, kAccThreads, 0, s>>>(part.table, dout, sorted_ids, order, N, C);
    TROUPE_CUDA_LAUNCHED();
  }
}

}  // namespace troupe::kernels::cuda::launch
