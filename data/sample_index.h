// The sample index of one split: which documents it holds, in what packing order,
// where each sample starts, and each sample's counts. Building it reads every
// document length and every token of the split once (the token scan finds the
// largest ID for the vocabulary check); it is cached next to the data as
//
//   PREFIX.troupe-<split>-<16 hex digits>.sidx
//
// where the hex digits hash the settings it depends on (split weights, seq_length,
// pad_to_boundary, seed). The file also stores the full key text, including the
// data files' sizes and CRC-32C checksums of their whole content (not their mtimes:
// an edit can keep size and mtime); a cache whose key differs (the data changed) or
// that is damaged is rebuilt and replaced atomically. A directory that
// cannot be written only costs the cache: the index is then built in memory.
//
// Epoch orders are not stored: position i of epoch e is sample
// KeyedPermutation(samples, key(seed, split, e))(i), computed on the fly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/packing.h"
#include "data/split.h"

namespace troupe::data {

struct SampleIndexSettings {
  Split split = Split::Train;
  std::string split_weights = "98,2,0";
  int32_t seq_length = 64;
  bool pad_to_boundary = false;
  uint64_t seed = 1234;
};

struct SampleIndex {
  DocumentRange documents;            // the split's sequences in the .idx
  std::vector<int64_t> doc_order;     // sequence IDs, in packing order
  std::vector<int64_t> start_doc;     // [samples] start: position in doc_order
  std::vector<int64_t> start_offset;  // [samples] start: token offset in that document
  std::vector<int32_t> loss_tokens;   // [samples]
  std::vector<int32_t> padding_tokens;// [samples]
  int64_t split_tokens = 0;           // tokens of the split's documents
  int32_t max_token = -1;             // largest token ID in the split
  int64_t max_token_bin_offset = -1;  // its byte offset in PREFIX.bin
  bool min_token_negative = false;    // a negative ID was found (signed dtypes only)
  int64_t negative_token_bin_offset = -1;
  bool from_cache = false;            // loaded rather than built
  std::string cache_path;             // "" when it could not be written

  int64_t samples() const { return int64_t(start_doc.size()); }
};

std::string sample_index_key(const IndexedDataset& data, const SampleIndexSettings& s);
std::string sample_index_path(const IndexedDataset& data, const SampleIndexSettings& s);

// Loads the cached index if its key matches, else builds and caches it.
SampleIndex load_or_build_sample_index(const IndexedDataset& data, const SampleIndexSettings& s);
// Builds without touching the cache.
SampleIndex build_sample_index(const IndexedDataset& data, const SampleIndexSettings& s);

// The split's document order seed and epoch permutation key.
uint64_t document_order_seed(uint64_t seed, Split split);
uint64_t epoch_key(uint64_t seed, Split split, int64_t epoch);

}  // namespace troupe::data
