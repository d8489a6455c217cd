// GPT-2 byte-level BPE. Each pre-tokenized piece (gpt2_pretokenize.h) is turned
// into its UTF-8 bytes, each byte into the vocabulary entry of its printable
// stand-in character (GPT-2's bytes_to_unicode table), and then adjacent pairs are
// merged lowest merge rank first, every occurrence of that pair left to right, until
// no pair in merges.txt remains — the algorithm of OpenAI's encoder.py.
#include <algorithm>
#include <array>
#include <climits>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/error.h"
#include "data/gpt2_pretokenize.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"

namespace troupe::data {
namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2's reversible byte -> printable character table: printable Latin-1 bytes
// stand for themselves; the other 68 bytes map to U+0100 onwards in byte order.
std::array<std::string, 256> byte_stand_ins() {
  std::array<std::string, 256> table;
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  int next = 0;
  for (int b = 0; b < 256; ++b) table[size_t(b)] = utf8(printable(b) ? char32_t(b) : char32_t(256 + next++));
  return table;
}

// GPT-2's files are 1 MB and 0.5 MB; vocabularies ten times larger still fit easily.
constexpr size_t kMaxTokenizerFileBytes = size_t(256) << 20;

std::string read_whole(const std::string& path, const char* what) {
  return read_input_file(path, "GPT-2 " + std::string(what), kMaxTokenizerFileBytes);
}

class Gpt2Tokenizer final : public Tokenizer {
 public:
  Gpt2Tokenizer(const std::string& vocab_path, const std::string& merges_path) {
    std::unordered_map<std::string, int32_t> vocab;
    {
      const std::string text = read_whole(vocab_path, "vocabulary (vocab.json)");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::parse_error& e) {
        throw DataError(vocab_path + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
      }
      if (!j.is_object()) throw DataError(vocab_path + ": expected a JSON object of token -> id");
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() > INT32_MAX) {
          throw DataError(vocab_path + ": entry \"" + it.key() + "\" has no valid integer id");
        }
        const int32_t id = it.value().get<int32_t>();
        vocab.emplace(it.key(), id);
        vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
      }
    }
    const auto eod = vocab.find("<|endoftext|>");
    if (eod == vocab.end()) throw DataError(vocab_path + ": no \"<|endoftext|>\" entry (GPT-2's EOD)");
    eod_ = eod->second;

    const auto stand_ins = byte_stand_ins();
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab.find(stand_ins[size_t(b)]);
      if (it == vocab.end()) {
        throw DataError(vocab_path + ": no entry for byte " + std::to_string(b) + " (\"" +
                        stand_ins[size_t(b)] + "\"): not a byte-level BPE vocabulary");
      }
      byte_id_[size_t(b)] = it->second;
    }

    const std::string merges = read_whole(merges_path, "merges (merges.txt)");
    std::istringstream lines(merges);
    std::string line;
    int64_t line_no = 0;
    int32_t rank = 0;
    while (std::getline(lines, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
          line.find(' ', sp + 1) != std::string::npos) {
        throw DataError(merges_path + ":" + std::to_string(line_no) +
                        ": expected two tokens separated by one space, got \"" + line + "\"");
      }
      const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
      const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
      if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
        const std::string& missing = ia == vocab.end() ? a : ib == vocab.end() ? b : a + b;
        throw DataError(merges_path + ":" + std::to_string(line_no) + ": \"" + missing +
                        "\" is not in " + vocab_path);
      }
      merges_.emplace(key(ia->second, ib->second), Merge{rank++, iab->second});
    }
  }

  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }

  void encode(std::string_view text, std::vector<int32_t>& out) override {
    pieces_.clear();
    gpt2_pretokenize(text, pieces_);
    for (const std::string_view piece : pieces_) {
      if (piece.size() > kLongPiece) {  // long runs: O(n log n), and not worth caching
        const auto ids = bpe_long(piece);
        out.insert(out.end(), ids.begin(), ids.end());
        continue;
      }
      auto it = cache_.find(piece);
      if (it == cache_.end()) {
        if (cache_.size() >= kCacheEntries) cache_.clear();
        it = cache_.emplace(std::string(piece), bpe(piece)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  // The same merges for long pieces (a run of letters or punctuation can be
  // megabytes): symbols in a linked list, candidate pairs in a min-heap ordered by
  // (rank, position). Popping the lowest rank, leftmost first, and skipping pairs
  // whose symbols have changed merges exactly what the round-by-round loop of bpe()
  // merges, in the same order.
  std::vector<int32_t> bpe_long(std::string_view piece) const {
    const int n = int(piece.size());
    const size_t len = piece.size();
    std::vector<int32_t> sym(len), prev(len), next(len);
    std::vector<char> alive(len, 1);
    for (int i = 0; i < n; ++i) {
      sym[size_t(i)] = byte_id_[static_cast<unsigned char>(piece[size_t(i)])];
      prev[size_t(i)] = i - 1;
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      int32_t rank, pos, left, right;  // pos: left symbol's slot; left/right: IDs when queued
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int pos) {
      if (pos < 0 || next[size_t(pos)] < 0) return;
      const int32_t a = sym[size_t(pos)], b = sym[size_t(next[size_t(pos)])];
      const auto it = merges_.find(key(a, b));
      if (it != merges_.end()) heap.push({it->second.rank, pos, a, b});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      const int r = next[size_t(c.pos)];
      if (!alive[size_t(c.pos)] || r < 0 || sym[size_t(c.pos)] != c.left || sym[size_t(r)] != c.right) continue;
      sym[size_t(c.pos)] = merges_.at(key(c.left, c.right)).merged;
      alive[size_t(r)] = 0;
      next[size_t(c.pos)] = next[size_t(r)];
      if (next[size_t(r)] >= 0) prev[size_t(next[size_t(r)])] = c.pos;
      push(prev[size_t(c.pos)]);
      push(c.pos);
    }
    std::vector<int32_t> out;
    for (int i = 0; i >= 0; i = next[size_t(i)]) out.push_back(sym[size_t(i)]);
    return out;
  }

  std::vector<int32_t> bpe(std::string_view piece) const {
    std::vector<int32_t> sym(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    while (sym.size() > 1) {
      int32_t best_rank = INT32_MAX;
      Merge best{};
      int32_t best_a = 0, best_b = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        const auto it = merges_.find(key(sym[i], sym[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best = it->second;
          best_a = sym[i];
          best_b = sym[i + 1];
        }
      }
      if (best_rank == INT32_MAX) break;
      size_t w = 0;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == best_a && sym[i + 1] == best_b) {
          sym[w++] = best.merged;
          i += 2;
        } else {
          sym[w++] = sym[i++];
        }
      }
      sym.resize(w);
    }
    return sym;
  }

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kCacheEntries = 1 << 20;
  static constexpr size_t kLongPiece = 64;

  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> merges_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = 0;
  std::vector<std::string_view> pieces_;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json,
                                               const std::string& merges_txt) {
  return std::make_unique<Gpt2Tokenizer>(vocab_json, merges_txt);
}

}  // namespace troupe::data
