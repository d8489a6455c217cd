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

// Added tokens found in text, as HF's AddedVocabulary finds them: the matches of all
// the contents, leftmost first and the longest among those starting there, each search
// resuming where the previous match ended. A single_word token's match counts only
// between non-word characters (Rust regex's \w: is_word_character) or the text's ends,
// and a discarded match is not searched again for shorter ones inside it. lstrip takes
// the whitespace run before a match into it (not what an earlier match took), rstrip
// the run after it.
class AddedTokenMatcher {
 public:
  struct Token {
    std::string content;  // as matched: normalized for a normalized token
    int32_t id;
    bool single_word, lstrip, rstrip;
  };
  void add(Token t) {
    by_first_[static_cast<unsigned char>(t.content[0])].push_back(std::move(t));
    empty_ = false;
  }
  // After the last add: each bucket longest first (the file's order among equals).
  void finish() {
    for (auto& bucket : by_first_)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const Token& a, const Token& b) { return a.content.size() > b.content.size(); });
  }
  bool empty() const { return empty_; }
  bool any_rstrip() const {
    for (const auto& bucket : by_first_)
      for (const Token& t : bucket)
        if (t.rstrip) return true;
    return false;
  }
  // The first token whose content starts with whitespace, or null.
  const Token* whitespace_first() const {
    for (const auto& bucket : by_first_)
      for (const Token& t : bucket)
        if (is_white_space(decode_utf8(t.content, 0).cp)) return &t;
    return nullptr;
  }

  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: text still to tokenize
  };
  void split(std::string_view text, std::vector<Segment>& out) const {
    size_t taken = 0;  // the end of the last segment pushed
    for (size_t i = 0; i < text.size();) {
      const Token* hit = nullptr;
      for (const Token& t : by_first_[static_cast<unsigned char>(text[i])])
        if (text.compare(i, t.content.size(), t.content) == 0) {
          hit = &t;
          break;
        }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + hit->content.size();
      i = stop;
      if (hit->single_word && ((start > 0 && is_word_character(last_char(text.substr(0, start)))) ||
                               (stop < text.size() && is_word_character(decode_utf8(text, stop).cp))))
        continue;
      if (hit->lstrip) {
        size_t s = start;
        while (s > taken) {
          const size_t b = last_char_start(text.substr(0, s));
          if (!is_white_space(decode_utf8(text, b).cp)) break;
          s = b;
        }
        start = s;
      }
      if (hit->rstrip)
        while (stop < text.size() && is_white_space(decode_utf8(text, stop).cp)) stop += decode_utf8(text, stop).bytes;
      if (start > taken) out.push_back({taken, start, -1});
      out.push_back({start, stop, hit->id});
      taken = stop;
    }
    if (taken < text.size()) out.push_back({taken, text.size(), -1});
  }

 private:
  // The start of the last character of non-empty `s` (an invalid byte is one).
  static size_t last_char_start(std::string_view s) {
    for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
      const size_t b = s.size() - back;
      const Utf8Char c = decode_utf8(s, b);
      if (c.cp != kInvalidUtf8 && b + c.bytes == s.size()) return b;
      if ((static_cast<unsigned char>(s[b]) & 0xc0) != 0x80) break;  // a lead byte that does not reach the end
    }
    return s.size() - 1;
  }
  static char32_t last_char(std::string_view s) { return decode_utf8(s, last_char_start(s)).cp; }

  std::array<std::vector<Token>, 256> by_first_;
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
    read_post_processor(j.contains("post_processor") ? j["post_processor"] : Json(), "post_processor");
    read_decoder(j.contains("decoder") ? j["decoder"] : Json());
    choose_eod(eod_id);
  }

  std::string name() const override { return "hf"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  const std::string& path() const override { return path_; }
  const std::string& eod_token() const override { return eod_token_; }

  void encode_with_special_tokens(std::string_view text, std::vector<int32_t>& out) override {
    if (!post_processor_refusal_.empty()) fail(post_processor_refusal_);
    out.insert(out.end(), template_prefix_.begin(), template_prefix_.end());
    encode(text, out);
    out.insert(out.end(), template_suffix_.begin(), template_suffix_.end());
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    if (!decoder_refusal_.empty()) fail(decoder_refusal_);
    std::string text, bytes;
    bool first = true;
    for (const int32_t id : ids) {
      const std::string* token = nullptr;
      if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) token = &it->second;
      else if (id >= 0 && size_t(id) < token_of_id_.size() && !token_of_id_[size_t(id)].empty()) token = &token_of_id_[size_t(id)];
      if (token == nullptr || (skip_special_tokens && special_.count(*token) > 0)) continue;
      if (!byte_level_decoder_) {  // no decoder: HF joins the tokens with spaces
        text += (first ? "" : " ") + *token;
        first = false;
        continue;
      }
      // A token some character of which is no byte's stand-in (an added token such
      // as "\xe4\xb8\xad") counts as its own UTF-8 bytes, as HF's ByteLevel decoder has it.
      text += stand_in_bytes(*token, bytes) ? bytes : *token;
    }
    return byte_level_decoder_ ? utf8_lossy(text) : text;
  }

  void encode(std::string_view text, std::vector<int32_t>& out) override {
    raw_segments_.clear();
    if (raw_added_.empty()) raw_segments_.push_back({0, text.size(), -1});
    else raw_added_.split(text, raw_segments_);
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
      else normalized_added_.split(part, norm_segments_);
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
    token_of_id_.resize(size_t(vocab_size_));
    for (const auto& [token, id] : vocab_) token_of_id_[size_t(id)] = token;
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
      if (content.empty()) fail(where + " has empty content");
      const auto flag = [&](const char* k) { return t.contains(k) && t[k] == true; };
      const bool special = flag("special");
      const bool normalized = t.contains("normalized") ? t["normalized"] == true : !special;
      // A normalized token is matched in normalized text as its normalized content,
      // and HF decodes it as that too. With no normalizer that is matching the raw
      // text, but still a second pass, as in HF.
      const std::string matched = normalized && nfc_ ? nfc(content) : content;
      (normalized ? normalized_added_ : raw_added_)
          .add({matched, id, flag("single_word"), flag("lstrip"), flag("rstrip")});
      if (special) special_.emplace(content, id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
      added_by_id_.emplace(id, matched);
    }
    raw_added_.finish();
    normalized_added_.finish();
    // After an rstrip token HF resumes its search where the token's content ended,
    // inside the whitespace it took; a token starting with whitespace could match
    // there and overlap it, which troupe does not reproduce.
    for (const AddedTokenMatcher* m : {&raw_added_, &normalized_added_})
      if (const auto* w = m->whitespace_first(); w != nullptr && m->any_rstrip())
        fail("added token \"" + w->content + "\" starts with whitespace and an added token of the same pass sets "
             "rstrip: HF matches them overlapping, which troupe does not support");
  }

  // The single-sequence template of the post-processor: IDs before and after the
  // text's. A kind that changes IDs and that troupe does not apply is remembered, and
  // refused when a caller asks for the special tokens (prepare-data does not by default).
  void read_post_processor(const Json& p, const std::string& where) {
    if (p.is_null()) return;
    const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
      if (!p.contains("processors") || !p["processors"].is_array()) fail(where + ": a Sequence without \"processors\"");
      // Each processor wraps what the ones before it made.
      for (size_t i = 0; i < p["processors"].size(); ++i)
        read_post_processor(p["processors"][i], where + ".processors[" + std::to_string(i) + "]");
      return;
    }
    std::vector<int32_t> before, after;
    if (type == "TemplateProcessing") {
      const Json& single = field(p, "single", Json::value_t::array);
      const Json specials = p.contains("special_tokens") && p["special_tokens"].is_object() ? p["special_tokens"] : Json::object();
      bool seen_a = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const Json& piece = single[i];
        const std::string at = where + ".single[" + std::to_string(i) + "]";
        if (piece.is_object() && piece.contains("Sequence") && piece["Sequence"].is_object()) {
          const Json& seq = piece["Sequence"];
          if (!seq.contains("id") || seq["id"] != "A" || seen_a)
            fail(at + ": a single-sequence template holds the sequence $A once (got " + seq.dump() + ")");
          seen_a = true;
        } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
                   piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string()) {
          const std::string name = piece["SpecialToken"]["id"].get<std::string>();
          if (!specials.contains(name) || !specials[name].is_object() || !specials[name].contains("ids") ||
              !specials[name]["ids"].is_array())
            fail(at + ": special token \"" + name + "\" is not in " + where + ".special_tokens with its ids");
          for (const Json& id : specials[name]["ids"]) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
              fail(where + ".special_tokens \"" + name + "\" has an id that is not a valid integer");
            (seen_a ? after : before).push_back(id.get<int32_t>());
          }
        } else {
          fail(at + " is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
        }
      }
      if (!seen_a) fail(where + ".single has no $A (the text's IDs)");
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      // [CLS] $A [SEP] (RoBERTa: <s> $A </s>); its offsets settings change no ID.
      for (const char* k : {"cls", "sep"}) {
        const Json& pair = field(p, k, Json::value_t::array);
        if (pair.size() != 2 || !pair[1].is_number_integer() || pair[1].get<int64_t>() < 0 || pair[1].get<int64_t>() > INT32_MAX)
          fail(where + "." + k + " is not [token, id]");
        (std::string(k) == "cls" ? before : after).push_back(pair[1].get<int32_t>());
      }
    } else {
      if (post_processor_refusal_.empty())
        post_processor_refusal_ = where + ": post-processor " + (type.empty() ? p.dump() : type) +
                                  " is not supported (troupe applies TemplateProcessing, BertProcessing, "
                                  "RobertaProcessing and ByteLevel, alone or in a Sequence)";
      return;
    }
    for (const int32_t id : before)
      if (id >= vocab_size_) fail(where + ": special token ID " + std::to_string(id) + " is outside the vocabulary");
    for (const int32_t id : after)
      if (id >= vocab_size_) fail(where + ": special token ID " + std::to_string(id) + " is outside the vocabulary");
    template_prefix_.insert(template_prefix_.begin(), before.begin(), before.end());
    template_suffix_.insert(template_suffix_.end(), after.begin(), after.end());
  }

  void read_decoder(const Json& d) {
    if (d.is_null()) {
      byte_level_decoder_ = false;
      return;
    }
    const std::string type = d.is_object() && d.contains("type") && d["type"].is_string() ? d["type"].get<std::string>() : "";
    if (type != "ByteLevel")
      decoder_refusal_ = "decoder " + (type.empty() ? d.dump() : type) +
                         " is not supported (troupe decodes with ByteLevel, the decoder of byte-level BPE files)";
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
  std::vector<std::string> token_of_id_;  // model.vocab by ID ("" where it has none)
  std::vector<int32_t> template_prefix_, template_suffix_;
  std::string post_processor_refusal_, decoder_refusal_;
  bool byte_level_decoder_ = true;
  std::vector<PreStep> steps_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  AddedTokenMatcher raw_added_, normalized_added_;

  // Scratch reused across encode calls.
  std::vector<AddedTokenMatcher::Segment> raw_segments_, norm_segments_;
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
