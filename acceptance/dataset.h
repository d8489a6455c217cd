// The acceptance dataset (docs/acceptance.md, part "First"): a few dozen readable documents
// built so that packing with pad_to_boundary produces each case the boundary rules
// must handle, in a fixed rhythm of five windows per group (T = seq_length):
//
//   a long document of 3T - r tokens (r in [2, 6])   -> two full windows (cut, no
//                                                       boundary) and a tail + padding
//   two short documents of 12..16 tokens (T = 32)    -> one window holding both, + padding
//   one medium document of 17..24 tokens             -> one window, the rest padding
//
// Every document ends with EOD (256); the text is lowercase words from a fixed list
// drawn with a seeded generator, so the same seed gives the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::acceptance {

inline constexpr int32_t kEod = 256;  // the byte tokenizer's end of document

// `groups` repetitions of (long, short, short, medium), each ending in EOD.
std::vector<std::vector<int32_t>> acceptance_documents(int seq_length, int groups, uint64_t seed);

// Writes the documents as a Megatron indexed dataset PREFIX.{bin,idx} (uint16 tokens,
// one sequence per document) through temporary names. Returns the prefix.
std::string write_acceptance_dataset(const std::string& prefix, int seq_length, int groups, uint64_t seed);

}  // namespace troupe::acceptance
