// The tokenizer.json reader and the encoding pipeline of data/hf_tokenizer.h, in HF
// tokenizers' order: added tokens split out, normalization, pre-tokenizer steps,
// byte-level BPE per piece.
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/byte_level_bpe.h"
#include "data/error.h"
#include "data/gpt2_pretokenize.h"
#include "data/hf_regex.h"
#include "data/mapped_file.h"
#include "data/unicode_text.h"

namespace troupe::data {
namespace {

using Json = nlohmann::json;

// Llama 3's tokenizer.json is 9 MB; Qwen2's 7 MB.
constexpr size_t kMaxFileBytes = size_t(512) << 20;

// Literal tokens found in text: at the leftmost position where any matches, the
// longest (HF's AddedVocabulary: Aho-Corasick, leftmost-longest).
class LiteralMatcher {
 public:
  void add(const std::string& content, int32_t id) {
    by_first_[static_cast<unsigned char>(content[0])].emplace_back(content, id);
    empty_ = false;
  }
  // After the last add: each bucket longest first (the file's order among equals).
  void finish() {
    for (auto& bucket : by_first_)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  bool empty() const { return empty_; }

  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: text still to tokenize
  };
  void split(std::string_view text, size_t base, std::vector<Segment>& out) const {
    size_t from = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto& bucket = by_first_[static_cast<unsigned char>(text[i])];
      for (const auto& [content, id] : bucket) {
        if (text.compare(i, content.size(), content) != 0) continue;
        if (i > from) out.push_back({base + from, base + i, -1});
        out.push_back({base + i, base + i + content.size(), id});
        from = i + content.size();
        i = from - 1;
        break;
      }
    }
    if (from < text.size()) out.push_back({base + from, base + text.size(), -1});
  }

 private:
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_;
  bool empty_ = true;
};

struct PreStep {
  enum Kind { SplitRegex, Digits, ByteLevel } kind = ByteLevel;
  std::unique_ptr<PreTokenizerRegex> regex;
  bool individual_digits = false;
  bool add_prefix_space = false;
  bool use_regex = true;
};

class HfJsonTokenizer final : public HfTokenizer {
 public:
  // `merges` false: everything but the merges (what vocab_size() and eod() need; the
  // merges are most of the reading time of a large file). Such a tokenizer cannot encode.
  HfJsonTokenizer(const std::string& path, std::optional<int32_t> eod_id, bool merges = true) : path_(path) {
    const std::string text = read_input_file(path, "Hugging Face tokenizer (tokenizer.json)", kMaxFileBytes);
    Json j;
    try {
      j = Json::parse(text);
    } catch (const Json::parse_error& e) {
      fail("invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
    }
    if (!j.is_object()) fail("not a tokenizer.json (expected a JSON object)");
    read_model(field(j, "model", Json::value_t::object), merges);
    read_normalizer(j.contains("normalizer") ? j["normalizer"] : Json());
    read_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json());
    read_added_tokens(j.contains("added_tokens") ? j["added_tokens"] : Json::array());
    choose_eod(eod_id);
  }

  std::string name() const override { return "hf"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  const std::string& path() const override { return path_; }
  const std::string& eod_token() const override { return eod_token_; }

  void encode(std::string_view text, std::vector<int32_t>& out) override {
    raw_segments_.clear();
    if (raw_added_.empty()) raw_segments_.push_back({0, text.size(), -1});
    else raw_added_.split(text, 0, raw_segments_);
    for (const auto& seg : raw_segments_) {
      if (seg.id >= 0) {
        out.push_back(seg.id);
        continue;
      }
      std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
      std::string normalized;
      if (nfc_) {
        normalized = nfc(part);
        part = normalized;
      }
      norm_segments_.clear();
      if (normalized_added_.empty()) norm_segments_.push_back({0, part.size(), -1});
      else normalized_added_.split(part, 0, norm_segments_);
      for (const auto& s : norm_segments_) {
        if (s.id >= 0) out.push_back(s.id);
        else encode_plain(part.substr(s.begin, s.end - s.begin), out);
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw DataError(path_ + ": " + what); }

  const Json& field(const Json& obj, const char* key, Json::value_t type) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->type() != type) {
      fail(std::string("field \"") + key + "\" is missing or not a JSON " +
           (type == Json::value_t::object ? "object" : type == Json::value_t::array ? "array" : "value"));
    }
    return *it;
  }
  static bool is_null_or(const Json& obj, const char* key, const Json& value) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() || *it == value;
  }

  // Text without added tokens: pre-tokenizer steps, then BPE per piece.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) {
    if (text.empty()) return;
    pieces_.assign(1, std::string(text));
    for (const PreStep& step : steps_) {
      next_.clear();
      for (const std::string& piece : pieces_) apply(step, piece, next_);
      pieces_.swap(next_);
    }
    for (const std::string& piece : pieces_) bpe_->encode_piece(piece, out);
  }

  void apply(const PreStep& step, const std::string& piece, std::vector<std::string>& out) {
    switch (step.kind) {
      case PreStep::SplitRegex: {
        ranges_.clear();
        step.regex->split_isolated(piece, decoded_, ranges_);
        for (const auto& [b, e] : ranges_) out.emplace_back(piece.substr(b, e - b));
        return;
      }
      case PreStep::Digits: {
        // Rust's char::is_numeric (Nd, Nl, No): each numeric character its own piece,
        // or each run of them; the text between is a piece too.
        size_t from = 0;
        bool in_run = false;
        for (size_t i = 0; i < piece.size();) {
          const Utf8Char c = decode_utf8(piece, i);
          const bool numeric = char_class(c.cp) == CharClass::Number;
          if ((numeric != in_run || (numeric && step.individual_digits)) && i > from) {
            out.push_back(piece.substr(from, i - from));
            from = i;
          }
          in_run = numeric;
          i += c.bytes;
        }
        if (from < piece.size()) out.push_back(piece.substr(from));
        return;
      }
      case PreStep::ByteLevel: {
        std::string p = step.add_prefix_space && !piece.empty() && piece[0] != ' ' ? " " + piece : piece;
        if (!step.use_regex) {
          out.push_back(std::move(p));
          return;
        }
        views_.clear();
        gpt2_pretokenize(p, views_);
        for (const std::string_view v : views_) out.emplace_back(v);
        return;
      }
    }
  }

  void read_model(const Json& m, bool read_merges) {
    const auto type = m.find("type");
    if (type == m.end() || !type->is_string()) fail("model.type is missing: not a BPE tokenizer.json");
    const std::string t = type->get<std::string>();
    if (t != "BPE") {
      const std::string kind = t == "Unigram"     ? "Unigram (a SentencePiece unigram model)"
                               : t == "WordPiece" ? "WordPiece (a BERT-style model)"
                               : t == "WordLevel" ? "WordLevel"
                                                  : "\"" + t + "\"";
      fail("model type " + kind + " is not supported: troupe reads byte-level BPE tokenizer.json files (model type BPE)");
    }
    if (!is_null_or(m, "dropout", Json())) fail("model.dropout is set: BPE dropout is random; troupe encodes deterministically");
    if (m.contains("byte_fallback") && m["byte_fallback"] == true)
      fail("model.byte_fallback is true (a SentencePiece-style BPE): troupe reads byte-level BPE files only");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (!is_null_or(m, k, Json("")))
        fail(std::string("model.") + k + " is set: not a byte-level BPE file (troupe supports neither)");
    const bool ignore_merges = m.contains("ignore_merges") && m["ignore_merges"] == true;

    const Json& vocab = field(m, "vocab", Json::value_t::object);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
        fail("model.vocab entry \"" + it.key() + "\" has no valid integer id");
      const int32_t id = it.value().get<int32_t>();
      vocab_.emplace(it.key(), id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
    }
    std::array<int32_t, 256> byte_id{};
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab_.find(byte_stand_ins()[size_t(b)]);
      if (it == vocab_.end())
        fail("model.vocab has no entry for byte " + std::to_string(b) + " (\"" + byte_stand_ins()[size_t(b)] +
             "\"): not a byte-level BPE vocabulary");
      byte_id[size_t(b)] = it->second;
    }
    bpe_ = std::make_unique<ByteLevelBpe>(byte_id);

    const Json& merges = field(m, "merges", Json::value_t::array);
    if (!read_merges) return;
    for (size_t i = 0; i < merges.size(); ++i) {
      const Json& e = merges[i];
      std::string a, b;
      if (e.is_string()) {  // "a b"
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
          fail("model.merges[" + std::to_string(i) + "] \"" + s + "\" is not two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        fail("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
      if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
        const std::string& missing = ia == vocab_.end() ? a : ib == vocab_.end() ? b : a + b;
        fail("model.merges[" + std::to_string(i) + "]: \"" + missing + "\" is not in model.vocab");
      }
      bpe_->add_merge(ia->second, ib->second, iab->second);
    }
    if (ignore_merges) {
      std::unordered_map<std::string, int32_t> whole;
      std::string bytes;
      for (const auto& [token, id] : vocab_)
        if (stand_in_bytes(token, bytes)) whole.emplace(bytes, id);
      bpe_->set_whole_pieces(whole);
    }
  }

  void read_normalizer(const Json& n) {
    if (n.is_null()) return;
    const std::string type = n.is_object() && n.contains("type") && n["type"].is_string() ? n["type"].get<std::string>() : "";
    if (type == "NFC") {
      nfc_ = true;
      return;
    }
    if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
      const Json& list = n["normalizers"];
      if (list.empty()) return;
      if (list.size() == 1) return read_normalizer(list[0]);
    }
    fail("normalizer " + (type.empty() ? n.dump() : type) +
         " is not supported (troupe applies none or NFC; byte-level BPE files have none or NFC)");
  }

  void add_step(const Json& s, const std::string& where) {
    const std::string type = s.is_object() && s.contains("type") && s["type"].is_string() ? s["type"].get<std::string>() : "";
    PreStep step;
    if (type == "ByteLevel") {
      step.add_prefix_space = s.contains("add_prefix_space") && s["add_prefix_space"] == true;
      step.use_regex = !s.contains("use_regex") || s["use_regex"] != false;
    } else if (type == "Split") {
      step.kind = PreStep::SplitRegex;
      const std::string behavior = s.contains("behavior") && s["behavior"].is_string() ? s["behavior"].get<std::string>() : "";
      if (behavior != "Isolated")
        fail(where + ": Split behavior \"" + behavior + "\" is not supported (troupe splits Isolated only)");
      if (s.contains("invert") && s["invert"] == true) fail(where + ": an inverted Split is not supported");
      const Json pattern = s.contains("pattern") ? s["pattern"] : Json();
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        step.regex = std::make_unique<PreTokenizerRegex>(pattern["Regex"].get<std::string>(), path_ + ": " + where);
      } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        std::string quoted;  // the literal as a regex of escaped characters
        for (const char c : pattern["String"].get<std::string>()) {
          if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) quoted += '\\';
          quoted += c;
        }
        if (quoted.empty()) fail(where + ": Split with an empty String pattern");
        step.regex = std::make_unique<PreTokenizerRegex>(quoted, path_ + ": " + where);
      } else {
        fail(where + ": Split has no \"Regex\" or \"String\" pattern");
      }
    } else if (type == "Digits") {
      step.kind = PreStep::Digits;
      step.individual_digits = s.contains("individual_digits") && s["individual_digits"] == true;
    } else {
      fail(where + ": pre-tokenizer " + (type.empty() ? s.dump() : type) +
           " is not supported (troupe reads byte-level BPE files: ByteLevel, alone or after Split and Digits)");
    }
    steps_.push_back(std::move(step));
  }

  void read_pre_tokenizer(const Json& p) {
    if (p.is_null()) fail("pre_tokenizer is null: not a byte-level BPE file (troupe needs a ByteLevel pre-tokenizer)");
    const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
    if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
      const Json& list = p["pretokenizers"];
      for (size_t i = 0; i < list.size(); ++i) add_step(list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    } else {
      add_step(p, "pre_tokenizer");
    }
    const auto byte_level = std::count_if(steps_.begin(), steps_.end(), [](const PreStep& s) { return s.kind == PreStep::ByteLevel; });
    if (byte_level != 1 || steps_.back().kind != PreStep::ByteLevel)
      fail("pre_tokenizer: troupe needs exactly one ByteLevel step, the last (a byte-level BPE file)");
  }

  void read_added_tokens(const Json& list) {
    if (!list.is_array()) fail("added_tokens is not a JSON array");
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& t = list[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
          t["id"].get<int64_t>() > INT32_MAX || !t.contains("content") || !t["content"].is_string())
        fail(where + " has no integer id and string content");
      const int32_t id = t["id"].get<int32_t>();
      const std::string content = t["content"].get<std::string>();
      for (const char* k : {"single_word", "lstrip", "rstrip"})
        if (t.contains(k) && t[k] == true)
          fail(where + " \"" + content + "\" sets " + k + ", which troupe does not support");
      if (content.empty()) fail(where + " has empty content");
      const bool special = t.contains("special") && t["special"] == true;
      const bool normalized = t.contains("normalized") ? t["normalized"] == true : !special;
      // With no normalizer, matching after normalization is matching the raw text,
      // but still a second pass, as in HF.
      (normalized ? normalized_added_ : raw_added_).add(content, id);
      if (special) special_.emplace(content, id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
      added_by_id_.emplace(id, content);
    }
    raw_added_.finish();
    normalized_added_.finish();
  }

  void choose_eod(std::optional<int32_t> eod_id) {
    if (eod_id) {
      if (*eod_id < 0 || *eod_id >= vocab_size_)
        fail("the end-of-document ID " + std::to_string(*eod_id) + " is outside the vocabulary [0, " +
             std::to_string(vocab_size_) + ")");
      eod_ = *eod_id;
      if (const auto it = added_by_id_.find(eod_); it != added_by_id_.end()) eod_token_ = it->second;
      for (const auto& [token, id] : vocab_)
        if (eod_token_.empty() && id == eod_) eod_token_ = token;
      return;
    }
    for (const char* name : kEodTokenNames) {
      if (const auto it = special_.find(name); it != special_.end()) {
        eod_ = it->second;
        eod_token_ = name;
        return;
      }
    }
    for (const char* name : kEodTokenNames) {
      if (const auto it = vocab_.find(name); it != vocab_.end()) {
        eod_ = it->second;
        eod_token_ = name;
        return;
      }
    }
    std::string names;
    for (const char* name : kEodTokenNames) names += std::string(names.empty() ? "" : ", ") + name;
    fail("no end-of-document token: none of " + names +
         " is in the file; name its ID with data.eod_id (prepare-data --eod-id)");
  }

  std::string path_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::map<std::string, int32_t> special_;
  std::map<int32_t, std::string> added_by_id_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1;
  std::string eod_token_;
  bool nfc_ = false;
  std::vector<PreStep> steps_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  LiteralMatcher raw_added_, normalized_added_;

  // Scratch reused across encode calls.
  std::vector<LiteralMatcher::Segment> raw_segments_, norm_segments_;
  std::vector<std::string> pieces_, next_;
  std::vector<std::pair<size_t, size_t>> ranges_;
  std::vector<std::string_view> views_;
  DecodedText decoded_;
};

}  // namespace

std::unique_ptr<HfTokenizer> make_hf_tokenizer(const std::string& path, std::optional<int32_t> eod_id) {
  return std::make_unique<HfJsonTokenizer>(path, eod_id);
}

HfTokenizerSummary read_hf_tokenizer_summary(const std::string& path, std::optional<int32_t> eod_id) {
  // A run opens its data several times (the start-up check, the coordinator, each
  // loader) and parsing Llama 3's 9 MB takes most of a second: the answer is kept per
  // file while its size and modification time stay the same.
  struct Key {
    std::string path;
    std::optional<int32_t> eod_id;
    uintmax_t size;
    std::filesystem::file_time_type mtime;
    bool operator==(const Key&) const = default;
  };
  static std::mutex mutex;
  static std::vector<std::pair<Key, HfTokenizerSummary>> cache;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto mtime = ec ? std::filesystem::file_time_type() : std::filesystem::last_write_time(path, ec);
  const Key key{path, eod_id, ec ? 0 : size, mtime};
  if (!ec) {
    const std::lock_guard lock(mutex);
    for (const auto& [k, summary] : cache)
      if (k == key) return summary;
  }
  const HfJsonTokenizer t(path, eod_id, false);  // a file that cannot be stat-ed fails here, named
  HfTokenizerSummary summary{t.vocab_size(), t.eod(), t.eod_token()};
  if (!ec) {
    const std::lock_guard lock(mutex);
    if (cache.size() >= 16) cache.erase(cache.begin());
    cache.emplace_back(key, summary);
  }
  return summary;
}

}  // namespace troupe::data
