#include "data/byte_level_bpe.h"

#include <climits>
#include <queue>

#include "data/unicode_text.h"

namespace troupe::data {
namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {  // the table reaches U+0143 at most
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

std::array<std::string, 256> make_stand_ins() {
  std::array<std::string, 256> table;
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  int next = 0;
  for (int b = 0; b < 256; ++b) table[size_t(b)] = utf8(printable(b) ? char32_t(b) : char32_t(256 + next++));
  return table;
}

}  // namespace

const std::array<std::string, 256>& byte_stand_ins() {
  static const std::array<std::string, 256> table = make_stand_ins();
  return table;
}

bool stand_in_bytes(std::string_view token, std::string& bytes) {
  static const std::unordered_map<char32_t, char> inverse = [] {
    std::unordered_map<char32_t, char> m;
    const auto& t = byte_stand_ins();
    for (int b = 0; b < 256; ++b) m.emplace(decode_utf8(t[size_t(b)], 0).cp, char(b));
    return m;
  }();
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const Utf8Char c = decode_utf8(token, i);
    const auto it = inverse.find(c.cp);
    if (it == inverse.end()) return false;
    bytes += it->second;
    i += c.bytes;
  }
  return true;
}

bool ByteLevelBpe::add_merge(int32_t left, int32_t right, int32_t merged) {
  return merges_.emplace(key(left, right), Merge{next_rank_++, merged}).second;
}

void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (!whole_.empty()) {
    const auto it = whole_.find(piece);
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kLongPiece) {  // long runs: O(n log n), and not worth caching
    const auto ids = merge_long(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  auto it = cache_.find(piece);
  if (it == cache_.end()) {
    if (cache_.size() >= kCacheEntries) cache_.clear();
    it = cache_.emplace(std::string(piece), merge_short(piece)).first;
  }
  out.insert(out.end(), it->second.begin(), it->second.end());
}

// The same merges for long pieces (a run of letters or punctuation can be
// megabytes): symbols in a linked list, candidate pairs in a min-heap ordered by
// (rank, position). Popping the lowest rank, leftmost first, and skipping pairs
// whose symbols have changed merges exactly what the round-by-round loop of
// merge_short() merges, in the same order.
std::vector<int32_t> ByteLevelBpe::merge_long(std::string_view piece) const {
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

std::vector<int32_t> ByteLevelBpe::merge_short(std::string_view piece) const {
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

}  // namespace troupe::data
