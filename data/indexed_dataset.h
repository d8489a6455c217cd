// Megatron-LM's indexed dataset (the "MMIDIDX" mmap format), byte-compatible with
// what megatron/core/datasets/indexed_dataset.py writes and reads:
//
//   PREFIX.bin  token IDs of every sequence, back to back, in the index's dtype
//   PREFIX.idx  little-endian:
//     offset 0   9 bytes   magic "MMIDIDX\0\0"
//     offset 9   u64       version, always 1
//     offset 17  u8        dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                          6 float64, 7 float32, 8 uint16)
//     offset 18  u64       sequence count S
//     offset 26  u64       document-index count D (documents + 1)
//     offset 34  i32[S]    sequence lengths (tokens)
//                i64[S]    sequence pointers (byte offsets into .bin)
//                i64[D]    document indices: 0, then the sequence index ending each document
//                i8[S]     sequence modes (multimodal files only; accepted and ignored)
//
// Megatron's GPT dataset packs sequences; a document groups sequences (one per
// sentence with --split-sentences, otherwise one). troupe's prepare-data writes one
// sequence per document, EOD included.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/atomic_file.h"

namespace troupe::data {

enum class TokenDType : uint8_t {
  UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, Float64 = 6, Float32 = 7, UInt16 = 8,
};

size_t dtype_size(TokenDType t);
const char* dtype_name(TokenDType t);
// Megatron's choice: uint16 when the vocabulary has fewer than 65500 entries, else int32.
TokenDType dtype_for_vocab(int64_t vocab_size);

inline constexpr size_t kIdxHeaderBytes = 34;

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin (regular files only) and validates the index
  // completely: magic, version, dtype, size, every sequence inside .bin and starting
  // where the one before ends (byte 0 for the first), .bin exactly tokens x element
  // size, the document indices. Throws DataError naming the file and byte offset of
  // the first problem.
  static IndexedDataset open(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  TokenDType dtype() const { return dtype_; }

  int64_t sequences() const { return sequences_; }
  // Documents (document-index entries minus one).
  int64_t documents() const { return doc_entries_ - 1; }
  int64_t total_tokens() const { return total_tokens_; }

  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;  // byte offset into .bin
  int64_t document_index(int64_t i) const;    // 0 <= i <= documents()

  // Copies tokens [offset, offset + count) of sequence `seq` into out, as int32.
  // Values outside int32 (int64 files) saturate; the sample index rejects them.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  std::vector<int32_t> sequence(int64_t seq) const;

  // Size and CRC-32C of the whole content of both files: what a cache built from
  // them depends on. Size and mtime alone would miss an edit that keeps both; the
  // CRC reads every byte (its cost: docs/performance.md, "Numbers the code's comments
  // rely on").
  std::string content_fingerprint() const;

 private:
  struct Files;
  std::shared_ptr<const Files> files_;  // shared: copies of a dataset share one mapping
  std::string prefix_;
  TokenDType dtype_ = TokenDType::UInt16;
  int64_t sequences_ = 0;
  int64_t doc_entries_ = 0;
  int64_t total_tokens_ = 0;
  const uint8_t* lengths_ = nullptr;   // i32[S], unaligned
  const uint8_t* pointers_ = nullptr;  // i64[S], unaligned
  const uint8_t* doc_index_ = nullptr; // i64[D], unaligned
  const uint8_t* bin_ = nullptr;
};

// Writes PREFIX.bin and PREFIX.idx through temporary names; nothing appears under
// the final names until finish(). Tokens must lie in [0, vocab_size).
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype, int64_t vocab_size);
  ~IndexedDatasetWriter();

  void add_sequence(std::span<const int32_t> tokens);
  void end_document();
  // One sequence that is one whole document (what prepare-data writes).
  void add_document(std::span<const int32_t> tokens) {
    add_sequence(tokens);
    end_document();
  }
  // Writes the index, fsyncs both files and renames them into place (.bin first).
  void finish();

  int64_t sequences() const { return int64_t(lengths_.size()); }
  int64_t documents() const { return int64_t(doc_index_.size()) - 1; }
  int64_t tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  int64_t vocab_size_;
  std::unique_ptr<AtomicFile> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_index_{0};
  std::vector<uint8_t> scratch_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace troupe::data
