#include "data/hf_regex.h"

#include <unicode/uchar.h>

#include <bitset>
#include <charconv>

#include "data/error.h"
#include "data/unicode_text.h"

namespace troupe::data {

void DecodedText::assign(std::string_view s) {
  cps.clear();
  offsets.clear();
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    cps.push_back(c.cp);
    offsets.push_back(i);
    i += c.bytes;
  }
  offsets.push_back(s.size());
}

namespace {

// One character test: a class, a literal (a class of one range) or '.'.
struct CharTest {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  uint32_t categories = 0;                // \p{X} inside: any of these general categories
  std::vector<uint32_t> not_categories;   // \P{X} inside: outside this one
  bool space = false, not_space = false;  // \s, \S inside
  bool negated = false;
  bool icase = false;  // ranges compared by simple case variants too
  std::bitset<128> ascii;  // the answer for ASCII, computed once

  bool member(char32_t cp) const {
    for (const auto& [lo, hi] : ranges)
      if (cp >= lo && cp <= hi) return true;
    if (categories != 0 && (general_category_mask(cp) & categories)) return true;
    for (const uint32_t m : not_categories)
      if (!(general_category_mask(cp) & m)) return true;
    if (space && is_white_space(cp)) return true;
    if (not_space && !is_white_space(cp)) return true;
    return false;
  }
  bool in_ranges(char32_t cp) const {
    for (const auto& [lo, hi] : ranges)
      if (cp >= lo && cp <= hi) return true;
    return false;
  }
  bool slow_matches(char32_t cp) const {
    bool in = member(cp);
    if (!in && icase && cp < kInvalidUtf8) {
      const auto c = UChar32(cp);
      in = in_ranges(char32_t(u_foldCase(c, U_FOLD_CASE_DEFAULT))) || in_ranges(char32_t(u_tolower(c))) ||
           in_ranges(char32_t(u_toupper(c)));
    }
    return in != negated;
  }
  void finish() {
    for (char32_t c = 0; c < 128; ++c) ascii[c] = slow_matches(c);
  }
  bool matches(char32_t cp) const { return cp < 128 ? ascii[cp] : slow_matches(cp); }
};

struct Node {
  enum Kind { Empty, Char, Seq, Alt, Repeat, Look } kind = Empty;
  size_t offset = 0;  // in the pattern, for errors
  Node() = default;
  Node(Kind k, size_t at) : kind(k), offset(at) {}
  int test = -1;      // Char: index into the tests
  std::vector<Node> kids;
  int min = 1, max = 1;  // Repeat; max -1: unbounded
  bool negative = false;  // Look
};

// Real patterns are under 200 bytes and nest groups 2 deep. The matcher recurses once
// per instruction along a path, so the pattern's length bounds its stack depth.
constexpr size_t kMaxPatternBytes = 4096;
constexpr int kMaxGroupDepth = 32;

// The pattern as an error shows it: whole up to 200 bytes, else its start.
std::string shown(std::string_view p) {
  return p.size() <= 200 ? std::string(p) : std::string(p.substr(0, 200)) + "...";
}

struct Parser {
  std::string_view p;
  const std::string& where;
  size_t i = 0;
  std::vector<CharTest>& tests;

  [[noreturn]] void fail(const std::string& what, size_t at) const {
    throw DataError(where + ": regex \"" + shown(p) + "\": " + what + " at offset " + std::to_string(at) +
                    " (troupe's pre-tokenizer regex engine supports alternation, groups, (?i:...), "
                    "lookahead, classes with \\s \\p{..}, and greedy quantifiers; data/hf_regex.h)");
  }
  bool at_end() const { return i >= p.size(); }
  char peek() const { return at_end() ? '\0' : p[i]; }

  int depth = 0;  // of groups, bounded: the parser, the compiler and the matcher recurse on it

  Node parse_alt(bool icase) {
    const size_t start = i;
    Node alt{Node::Alt, start};
    alt.kids.push_back(parse_seq(icase));
    while (peek() == '|') {
      ++i;
      alt.kids.push_back(parse_seq(icase));
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Node parse_seq(bool icase) {
    Node seq{Node::Seq, i};
    while (!at_end() && peek() != '|' && peek() != ')') {
      Node atom = parse_atom(icase);
      parse_quantifier(atom);
      seq.kids.push_back(std::move(atom));
    }
    if (seq.kids.empty()) return Node{Node::Empty, seq.offset};
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  int parse_int(size_t at) {
    int v = 0;
    const auto r = std::from_chars(p.data() + i, p.data() + p.size(), v);
    if (r.ec != std::errc() || v < 0) fail("a malformed {m,n} quantifier", at);
    i = size_t(r.ptr - p.data());
    return v;
  }

  void parse_quantifier(Node& atom) {
    if (at_end()) return;
    const size_t at = i;
    int min = 0, max = 0;
    const char c = peek();
    if (c == '?') { min = 0; max = 1; ++i; }
    else if (c == '*') { min = 0; max = -1; ++i; }
    else if (c == '+') { min = 1; max = -1; ++i; }
    else if (c == '{') {
      ++i;
      min = parse_int(at);
      max = min;
      if (peek() == ',') {
        ++i;
        max = peek() == '}' ? -1 : parse_int(at);
      }
      if (peek() != '}' || (max != -1 && max < min)) fail("a malformed {m,n} quantifier", at);
      ++i;
    } else {
      return;
    }
    if (peek() == '?') fail("a lazy quantifier", i);
    if (peek() == '+') fail("a possessive quantifier", i);
    if (peek() == '?' || peek() == '*' || peek() == '+' || peek() == '{') fail("a repeated quantifier", i);
    if (atom.kind == Node::Look || atom.kind == Node::Empty) fail("a quantifier on a lookahead or empty group", at);
    Node rep{Node::Repeat, at};
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(std::move(atom));
    atom = std::move(rep);
  }

  Node char_node(CharTest t, size_t at) {
    tests.push_back(std::move(t));
    Node n{Node::Char, at};
    n.test = int(tests.size() - 1);
    return n;
  }

  char32_t next_char() {
    const Utf8Char c = decode_utf8(p, i);
    if (c.cp == kInvalidUtf8) fail("invalid UTF-8", i);
    i += c.bytes;
    return c.cp;
  }

  uint32_t hex(size_t digits_min, size_t digits_max, size_t at) {
    uint32_t v = 0;
    size_t n = 0;
    while (n < digits_max && !at_end() && std::isxdigit(static_cast<unsigned char>(peek()))) {
      const char h = peek();
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i;
      ++n;
    }
    if (n < digits_min || v > 0x10ffff) fail("a malformed hexadecimal escape", at);
    return v;
  }

  uint32_t category(size_t at) {
    if (peek() != '{') fail("\\p without {NAME}", at);
    const size_t close = p.find('}', i);
    if (close == std::string_view::npos) fail("an unterminated \\p{", at);
    const std::string_view name = p.substr(i + 1, close - i - 1);
    i = close + 1;
    static const std::pair<std::string_view, uint32_t> kNames[] = {
        {"L", U_GC_L_MASK},   {"Lu", U_GC_LU_MASK}, {"Ll", U_GC_LL_MASK}, {"Lt", U_GC_LT_MASK},
        {"Lm", U_GC_LM_MASK}, {"Lo", U_GC_LO_MASK}, {"M", U_GC_M_MASK},   {"Mn", U_GC_MN_MASK},
        {"Mc", U_GC_MC_MASK}, {"Me", U_GC_ME_MASK}, {"N", U_GC_N_MASK},   {"Nd", U_GC_ND_MASK},
        {"Nl", U_GC_NL_MASK}, {"No", U_GC_NO_MASK}, {"P", U_GC_P_MASK},   {"Pc", U_GC_PC_MASK},
        {"Pd", U_GC_PD_MASK}, {"Ps", U_GC_PS_MASK}, {"Pe", U_GC_PE_MASK}, {"Pi", U_GC_PI_MASK},
        {"Pf", U_GC_PF_MASK}, {"Po", U_GC_PO_MASK}, {"S", U_GC_S_MASK},   {"Sm", U_GC_SM_MASK},
        {"Sc", U_GC_SC_MASK}, {"Sk", U_GC_SK_MASK}, {"So", U_GC_SO_MASK}, {"Z", U_GC_Z_MASK},
        {"Zs", U_GC_ZS_MASK}, {"Zl", U_GC_ZL_MASK}, {"Zp", U_GC_ZP_MASK}, {"C", U_GC_C_MASK},
        {"Cc", U_GC_CC_MASK}, {"Cf", U_GC_CF_MASK}, {"Co", U_GC_CO_MASK}, {"Cs", U_GC_CS_MASK},
        {"Cn", U_GC_CN_MASK}};
    for (const auto& [n, mask] : kNames)
      if (n == name) return mask;
    fail("the unknown or unsupported property \\p{" + std::string(name) + "}", at);
  }

  // One escape after '\\' (already consumed) inside or outside a class: either adds
  // to `t` (a class escape) or returns a literal character.
  std::optional<char32_t> escape(CharTest& t, size_t at) {
    if (at_end()) fail("a trailing backslash", at);
    const char c = p[i++];
    switch (c) {
      case 's': t.space = true; return std::nullopt;
      case 'S': t.not_space = true; return std::nullopt;
      case 'p': t.categories |= category(at); return std::nullopt;
      case 'P': t.not_categories.push_back(category(at)); return std::nullopt;
      case 'r': return U'\r';
      case 'n': return U'\n';
      case 't': return U'\t';
      case 'f': return U'\f';
      case 'v': return U'\v';
      case 'e': return char32_t(0x1b);
      case 'a': return char32_t(0x07);
      case 'x':
        if (peek() == '{') {
          ++i;
          const uint32_t v = hex(1, 8, at);
          if (peek() != '}') fail("a malformed \\x{...} escape", at);
          ++i;
          return char32_t(v);
        }
        return char32_t(hex(1, 2, at));
      case 'u': return char32_t(hex(4, 4, at));
      default: break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) return char32_t(u);  // escaped punctuation
    fail(std::string("the escape \\") + c, at);
  }

  Node parse_class(bool icase, size_t at) {
    CharTest t;
    t.icase = icase;
    if (peek() == '^') {
      t.negated = true;
      ++i;
    }
    bool first = true;
    while (true) {
      if (at_end()) fail("an unterminated character class", at);
      if (peek() == ']' && !first) {
        ++i;
        break;
      }
      first = false;
      const size_t item_at = i;
      if (peek() == '[') fail("a nested character class", item_at);
      if (p.substr(i, 2) == "&&") fail("a class intersection &&", item_at);
      std::optional<char32_t> lo;
      if (peek() == '\\') {
        ++i;
        lo = escape(t, item_at);
      } else {
        lo = next_char();
      }
      if (!lo) continue;
      char32_t hi = *lo;
      if (peek() == '-' && i + 1 < p.size() && p[i + 1] != ']') {
        ++i;
        const size_t hi_at = i;
        if (peek() == '\\') {
          ++i;
          CharTest dummy;
          const auto h = escape(dummy, hi_at);
          if (!h) fail("a class escape as a range end", hi_at);
          hi = *h;
        } else {
          hi = next_char();
        }
        if (hi < *lo) fail("a reversed range", item_at);
      }
      t.ranges.emplace_back(*lo, hi);
    }
    return char_node(std::move(t), at);
  }

  Node parse_atom(bool icase) {
    const size_t at = i;
    const char c = peek();
    if (c == '(') {
      ++i;
      bool inner_icase = icase;
      Node look;
      bool is_look = false;
      if (peek() == '?') {
        const std::string_view rest = p.substr(i);
        if (rest.substr(0, 2) == "?:") {
          i += 2;
        } else if (rest.substr(0, 3) == "?i:") {
          i += 3;
          inner_icase = true;
        } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!") {
          is_look = true;
          look = Node{Node::Look, at};
          look.negative = rest[1] == '!';
          i += 2;
        } else if (rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
          fail("a lookbehind", at);
        } else {
          fail("the group construct (" + std::string(rest.substr(0, 3)), at);
        }
      }
      if (++depth > kMaxGroupDepth) fail("groups nested more than " + std::to_string(kMaxGroupDepth) + " deep", at);
      Node inner = parse_alt(inner_icase);
      --depth;
      if (peek() != ')') fail("an unclosed group", at);
      ++i;
      if (!is_look) return inner;
      look.kids.push_back(std::move(inner));
      return look;
    }
    if (c == '[') {
      ++i;
      return parse_class(icase, at);
    }
    if (c == '.') {
      ++i;
      CharTest t;  // Oniguruma's default: any character but a newline
      t.negated = true;
      t.ranges.emplace_back(U'\n', U'\n');
      return char_node(std::move(t), at);
    }
    if (c == '^' || c == '$') fail(std::string("the anchor ") + c, at);
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat", at);
    CharTest t;
    t.icase = icase;
    std::optional<char32_t> lit;
    if (c == '\\') {
      ++i;
      lit = escape(t, at);
    } else {
      lit = next_char();
    }
    if (lit) t.ranges.emplace_back(*lit, *lit);
    return char_node(std::move(t), at);
  }
};

}  // namespace

struct PreTokenizerRegex::Program {
  enum Op { Char, Star, Split, Look, Accept };
  struct Inst {
    explicit Inst(Op o) : op(o) {}
    Op op = Accept;
    int test = -1;
    int min = 0, max = 0;  // Star; max -1: unbounded
    int next = -1;
    std::vector<int> alts;  // Split
    int body = -1;          // Look
    bool negative = false;  // Look
  };
  std::vector<CharTest> tests;
  std::vector<Inst> code;
  int entry = -1;
  std::string where;
  std::string pattern;

  int emit(Inst in) {
    code.push_back(std::move(in));
    return int(code.size() - 1);
  }

  [[noreturn]] void fail(const std::string& what, size_t at) const {
    throw DataError(where + ": regex \"" + shown(pattern) + "\": " + what + " at offset " + std::to_string(at) +
                    " (troupe's pre-tokenizer regex engine repeats single characters and makes groups "
                    "optional with ?; data/hf_regex.h)");
  }

  // Compiles `n` so that a match continues at `next`; returns its first instruction.
  int build(const Node& n, int next) {
    switch (n.kind) {
      case Node::Empty: return next;
      case Node::Char: {
        Inst in{Char};
        in.test = n.test;
        in.next = next;
        return emit(std::move(in));
      }
      case Node::Seq: {
        int at = next;
        for (auto it = n.kids.rbegin(); it != n.kids.rend(); ++it) at = build(*it, at);
        return at;
      }
      case Node::Alt: {
        Inst in{Split};
        for (const Node& k : n.kids) in.alts.push_back(build(k, next));
        return emit(std::move(in));
      }
      case Node::Repeat: {
        const Node& body = n.kids[0];
        if (body.kind == Node::Char) {
          Inst in{Star};
          in.test = body.test;
          in.min = n.min;
          in.max = n.max;
          in.next = next;
          return emit(std::move(in));
        }
        if (n.min == 1 && n.max == 1) return build(body, next);
        if (n.min == 0 && n.max == 1) {
          Inst in{Split};
          in.alts = {build(body, next), next};
          return emit(std::move(in));
        }
        fail("a repeated group (only single characters repeat; a group may be optional with ?)", n.offset);
      }
      case Node::Look: {
        const int accept = emit(Inst{Accept});
        Inst in{Look};
        in.body = build(n.kids[0], accept);
        in.negative = n.negative;
        in.next = next;
        return emit(std::move(in));
      }
    }
    return next;
  }

  bool run(int pc, const std::vector<char32_t>& s, size_t pos, size_t& end) const {
    const Inst& in = code[size_t(pc)];
    switch (in.op) {
      case Char:
        if (pos < s.size() && tests[size_t(in.test)].matches(s[pos])) return run(in.next, s, pos + 1, end);
        return false;
      case Star: {
        const CharTest& t = tests[size_t(in.test)];
        size_t k = 0;
        const size_t limit = in.max < 0 ? s.size() - pos : std::min(size_t(in.max), s.size() - pos);
        while (k < limit && t.matches(s[pos + k])) ++k;
        if (k < size_t(in.min)) return false;
        for (size_t j = k + 1; j-- > size_t(in.min);)
          if (run(in.next, s, pos + j, end)) return true;
        return false;
      }
      case Split:
        for (const int a : in.alts)
          if (run(a, s, pos, end)) return true;
        return false;
      case Look: {
        size_t ignored = 0;
        if (run(in.body, s, pos, ignored) == in.negative) return false;
        return run(in.next, s, pos, end);
      }
      case Accept: end = pos; return true;
    }
    return false;
  }
};

PreTokenizerRegex::PreTokenizerRegex(std::string_view pattern, const std::string& where)
    : p_(std::make_unique<Program>()) {
  p_->where = where;
  p_->pattern = std::string(pattern);
  Parser parser{pattern, where, 0, p_->tests};
  if (pattern.size() > kMaxPatternBytes)
    parser.fail("a pattern of " + std::to_string(pattern.size()) + " bytes, more than " +
                std::to_string(kMaxPatternBytes), 0);
  const Node root = parser.parse_alt(false);
  if (!parser.at_end()) parser.fail("an unmatched )", parser.i);
  for (CharTest& t : p_->tests) t.finish();
  const int accept = p_->emit(Program::Inst{Program::Accept});
  p_->entry = p_->build(root, accept);
}

PreTokenizerRegex::~PreTokenizerRegex() = default;
PreTokenizerRegex::PreTokenizerRegex(PreTokenizerRegex&&) noexcept = default;
PreTokenizerRegex& PreTokenizerRegex::operator=(PreTokenizerRegex&&) noexcept = default;

std::optional<std::pair<size_t, size_t>> PreTokenizerRegex::find(const DecodedText& text, size_t from) const {
  for (size_t start = from; start < text.size(); ++start) {
    size_t end = 0;
    if (p_->run(p_->entry, text.cps, start, end) && end > start) return std::make_pair(start, end);
  }
  return std::nullopt;
}

void PreTokenizerRegex::split_isolated(std::string_view text, DecodedText& scratch,
                                       std::vector<std::pair<size_t, size_t>>& pieces) const {
  scratch.assign(text);
  size_t pos = 0;
  while (pos < scratch.size()) {
    const auto m = find(scratch, pos);
    const size_t begin = m ? m->first : scratch.size();
    if (begin > pos) pieces.emplace_back(scratch.offsets[pos], scratch.offsets[begin]);
    if (!m) break;
    pieces.emplace_back(scratch.offsets[m->first], scratch.offsets[m->second]);
    pos = m->second;
  }
}

}  // namespace troupe::data
