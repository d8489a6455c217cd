// Byte-level BPE, the model of GPT-2's files and of Hugging Face tokenizer.json files
// of model type BPE with ByteLevel pre-tokenization. A pre-tokenized piece is turned
// into its UTF-8 bytes, each byte into the vocabulary entry of its printable stand-in
// character (GPT-2's bytes_to_unicode table), and then adjacent pairs are merged
// lowest merge rank first, every occurrence of that pair left to right, until no
// listed pair remains: the algorithm of OpenAI's encoder.py and of HF tokenizers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::data {

// GPT-2's reversible byte -> printable character table (UTF-8 strings): printable
// Latin-1 bytes stand for themselves; the other 68 bytes map to U+0100 onwards in
// byte order.
const std::array<std::string, 256>& byte_stand_ins();

// The bytes a vocabulary entry stands for, or false when some character of `token` is
// no byte's stand-in (an added token such as "<|endoftext|>" is all stand-ins).
bool stand_in_bytes(std::string_view token, std::string& bytes);

class ByteLevelBpe {
 public:
  // byte_ids[b]: the vocabulary ID of byte b's stand-in.
  explicit ByteLevelBpe(const std::array<int32_t, 256>& byte_ids) : byte_id_(byte_ids) {}

  // The next merge; its rank is the number of calls before it. False, and nothing
  // changed, when the pair is listed already (the first listing keeps its rank).
  bool add_merge(int32_t left, int32_t right, int32_t merged);

  // HF's ignore_merges: a piece that is itself a vocabulary entry is that entry,
  // whatever the merges would make of it. Keyed by the bytes the entry stands for.
  void set_whole_pieces(const std::unordered_map<std::string, int32_t>& by_bytes) {
    whole_.clear();
    whole_.insert(by_bytes.begin(), by_bytes.end());
  }

  // Appends the IDs of one pre-tokenized piece. Not thread-safe (a cache of pieces).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::vector<int32_t> merge_short(std::string_view piece) const;
  std::vector<int32_t> merge_long(std::string_view piece) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kCacheEntries = 1 << 20;
  static constexpr size_t kLongPiece = 64;

  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t next_rank_ = 0;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> whole_;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> cache_;
};

}  // namespace troupe::data
