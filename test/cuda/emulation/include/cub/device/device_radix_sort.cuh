// CPU emulation of cub::DeviceRadixSort::SortPairs (see troupe_cuda_emulation.h): a
// stable sort of (key, value) pairs by key, as CUB's LSD radix sort is stable.
#pragma once
#include <algorithm>
#include <numeric>
#include <vector>

#include "troupe_cuda_emulation.h"

namespace cub {
struct DeviceRadixSort {
  template <class K, class V, class N>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, N num_items, int /*begin_bit*/ = 0, int /*end_bit*/ = int(sizeof(K) * 8),
                               cudaStream_t /*stream*/ = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 16;
      return cudaSuccess;
    }
    troupe_emu::DeviceAccess device;  // keys and values are device memory
    std::vector<size_t> idx(static_cast<size_t>(num_items));
    std::iota(idx.begin(), idx.end(), size_t(0));
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return keys_in[a] < keys_in[b]; });
    std::vector<K> k(idx.size());
    std::vector<V> v(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) {
      k[i] = keys_in[idx[i]];
      v[i] = values_in[idx[i]];
    }
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
    return cudaSuccess;
  }
};
}  // namespace cub
