// What prepare-data writes beside a dataset it made: PREFIX.troupe-tokenizer.json, the
// tokenizer's name, vocabulary size and end-of-document ID, with the sizes of the .bin
// and .idx it describes:
//
//   {"tokenizer": "gpt2", "vocab_size": 50257, "eod": 50256, "bin_bytes": N, "idx_bytes": M}
//
// A dataset holds token IDs only (Megatron's format has no tokenizer field), so this is
// how a blend finds datasets prepared with different tokenizers (docs/data.md,
// "Blends"). Datasets prepared elsewhere have none; a file whose sizes are not the
// dataset's (the dataset was prepared again by another tool) is stale and ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe::data {

struct DatasetTokenizer {
  std::string tokenizer;  // Tokenizer::name(): "bytes", "gpt2", "hf"
  int64_t vocab_size = 0;
  int32_t eod = 0;
};

std::string dataset_tokenizer_path(const std::string& prefix);

// Written after PREFIX.bin and PREFIX.idx, through the durable-file module.
void write_dataset_tokenizer(const std::string& prefix, const DatasetTokenizer& t);

// The dataset's tokenizer when its file is there and describes the dataset's current
// files; nullopt otherwise. A file that is not valid JSON of this shape: DataError
// naming it.
std::optional<DatasetTokenizer> read_dataset_tokenizer(const std::string& prefix);

}  // namespace troupe::data
