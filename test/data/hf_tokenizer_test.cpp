// Hugging Face tokenizer.json (data/hf_tokenizer.h) against reference IDs from HF
// tokenizers: five small files of the kinds troupe reads (GPT-2's ByteLevel regex,
// Llama 3's and Qwen2's Split + ByteLevel, SmolLM's Digits + ByteLevel, and a String
// Split + digit runs + ByteLevel with a prefix space), built and
// encoded by tools/data_hf_tokenizer_reference.py; real files when
// TROUPE_HF_TOKENIZER_FILES names a folder of NAME.tokenizer.json + NAME.expected.json.
// Also the pre-tokenizer regex engine (data/hf_regex.h) and what is refused.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "data/error.h"
#include "data/hf_regex.h"
#include "data/hf_tokenizer.h"
#include "data/unicode_text.h"
#include "test/data/helpers.h"

using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

const std::string kHfFixtures = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/hf/";
const char* kKinds[] = {"gpt2_style", "llama3_style", "qwen2_style", "smollm_style", "misc_style"};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const nlohmann::json& expected() {
  static const nlohmann::json doc = read_json(kHfFixtures + "expected.json");
  return doc;
}

std::vector<int32_t> encode(Tokenizer& t, std::string_view s) {
  std::vector<int32_t> ids;
  t.encode(s, ids);
  return ids;
}

const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> split(const std::string& pattern, std::string_view text) {
  const PreTokenizerRegex re(pattern, "test");
  DecodedText scratch;
  std::vector<std::pair<size_t, size_t>> ranges;
  re.split_isolated(text, scratch, ranges);
  std::vector<std::string> out;
  for (const auto& [b, e] : ranges) out.emplace_back(text.substr(b, e - b));
  return out;
}

std::string regex_error(const std::string& pattern) {
  try {
    PreTokenizerRegex(pattern, "f.json: pre_tokenizer");
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string load_error(const std::string& path) {
  try {
    make_hf_tokenizer(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

// The GPT-2-style fixture with one change made to its JSON.
std::string variant(const ScratchDir& d, const std::string& name,
                    const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json j = read_json(kHfFixtures + "gpt2_style.tokenizer.json");
  change(j);
  write_text(d / name, j.dump());
  return d / name;
}

}  // namespace

TEST_CASE("pre-tokenizer regex: Llama 3's pattern, alternative by alternative") {
  CHECK(split(kLlama3, "Hello world") == std::vector<std::string>{"Hello", " world"});
  // Case-insensitive contractions, and the apostrophe run as punctuation otherwise.
  CHECK(split(kLlama3, "IT'S we'LL") == std::vector<std::string>{"IT", "'S", " we", "'LL"});
  CHECK(split(kLlama3, "a'x") == std::vector<std::string>{"a", "'x"});
  // [^\r\n\p{L}\p{N}]?\p{L}+ takes one leading non-letter; digits go in threes.
  CHECK(split(kLlama3, "(word 1234567") == std::vector<std::string>{"(word", " ", "123", "456", "7"});
  // Whitespace before a non-space is left for it; a newline run keeps its spaces.
  CHECK(split(kLlama3, "a   b") == std::vector<std::string>{"a", "  ", " b"});
  CHECK(split(kLlama3, "x  \n\n  y") == std::vector<std::string>{"x", "  \n\n", " ", " y"});
  CHECK(split(kLlama3, "end  ") == std::vector<std::string>{"end", "  "});
  CHECK(split(kLlama3, "a!!\n\nb") == std::vector<std::string>{"a", "!!\n\n", "b"});
  // Unicode classes: letters with combining marks split; CJK letters; invalid bytes
  // are characters of no class.
  CHECK(split(kLlama3, "e\xcc\x81t\xe4\xb8\xad") == std::vector<std::string>{"e", "\xcc\x81t\xe4\xb8\xad"});
  CHECK(split(kLlama3, "ab\xff\xfe" "c") == std::vector<std::string>{"ab", "\xff\xfe", "c"});
  CHECK(split(kLlama3, "").empty());
  // A stretch no alternative matches is a piece of its own (Split, Isolated).
  CHECK(split("[0-9]+", "ab12cd3") == std::vector<std::string>{"ab", "12", "cd", "3"});
  CHECK(split("a(?=b)", "aabab") == std::vector<std::string>{"a", "a", "b", "a", "b"});
  CHECK(split("x(?:yz)?", "xxyzx") == std::vector<std::string>{"x", "xyz", "x"});
  CHECK(split(R"(\p{Lu}\p{Ll}+|\x{1F600}|\u00e9)", "AbcdE\xf0\x9f\x98\x80\xc3\xa9" "E") ==
        std::vector<std::string>{"Abcd", "E", "\xf0\x9f\x98\x80", "\xc3\xa9", "E"});
}

TEST_CASE("pre-tokenizer regex: a megabyte-long run matches without deep recursion") {
  const std::string run(1 << 20, 'a');
  CHECK(split(kLlama3, run + " " + run) == std::vector<std::string>{run, " " + run});
  const std::string spaces(1 << 20, ' ');
  CHECK(split(kLlama3, spaces + "x") == std::vector<std::string>{spaces.substr(1), " x"});
}

TEST_CASE("pre-tokenizer regex: unsupported constructs are refused, named with their offset") {
  CHECK(regex_error("a+?") ==
        "f.json: pre_tokenizer: regex \"a+?\": a lazy quantifier at offset 2 (troupe's pre-tokenizer regex engine "
        "supports alternation, groups, (?i:...), lookahead, classes with \\s \\p{..}, and greedy quantifiers; "
        "data/hf_regex.h)");
  CHECK(regex_error("a++").find("a possessive quantifier at offset 2") != std::string::npos);
  CHECK(regex_error("(?<=a)b").find("a lookbehind at offset 0") != std::string::npos);
  CHECK(regex_error("\\d+").find("the escape \\d at offset 0") != std::string::npos);
  CHECK(regex_error("\\p{Greek}").find("the unknown or unsupported property \\p{Greek} at offset 0") !=
        std::string::npos);
  CHECK(regex_error("(ab)+").find("a repeated group (only single characters repeat") != std::string::npos);
  CHECK(regex_error("^a").find("the anchor ^ at offset 0") != std::string::npos);
  CHECK(regex_error("(a").find("an unclosed group at offset 0") != std::string::npos);
  CHECK(regex_error("a)").find("an unmatched ) at offset 1") != std::string::npos);
  CHECK(regex_error("[a-").find("an unterminated character class at offset 0") != std::string::npos);
  CHECK(regex_error("a{3,1}").find("a malformed {m,n} quantifier at offset 1") != std::string::npos);
}

TEST_CASE("HF tokenizer.json: the five fixture kinds match HF tokenizers ID for ID") {
  const auto& doc = expected();
  REQUIRE(doc["cases"].size() >= 300);
  for (const char* kind : kKinds) {
    INFO("file: " << kind);
    auto tok = make_hf_tokenizer(kHfFixtures + kind + ".tokenizer.json");
    const auto& info = doc["files"][kind];
    CHECK(tok->name() == "hf");
    CHECK(tok->vocab_size() == info["vocab_size"].get<int64_t>());
    CHECK(tok->eod() == info["eod_id"].get<int32_t>());
    CHECK(tok->eod_token() == info["eod_token"].get<std::string>());
    int mismatches = 0;
    for (int pass = 0; pass < 2; ++pass) {  // the second pass goes through the piece cache
      for (const auto& c : doc["cases"]) {
        const std::string text = c["text"];
        const auto want = c["ids"][kind].get<std::vector<int32_t>>();
        const auto got = encode(*tok, text);
        if (got != want) {
          ++mismatches;
          INFO("text: \"" << text << "\"");
          CHECK(got == want);
        }
      }
    }
    CHECK(mismatches == 0);
  }
}

// The extras (tools/data_hf_tokenizer_reference.py extras): added tokens with lstrip,
// rstrip, single_word and normalized contents; BOS and other post-processor templates;
// decoding. Each file's plain IDs of a text: extras_expected.json for the new files,
// expected.json for the five.
const char* kExtraKinds[] = {"added_flags", "nfc_flags", "llama3_seq", "roberta_post", "template_multi"};

const nlohmann::json& extras() {
  static const nlohmann::json doc = read_json(kHfFixtures + "extras_expected.json");
  return doc;
}

std::vector<int32_t> plain_ids(const nlohmann::json& c, const std::string& kind) {
  if (c["ids"].contains(kind)) return c["ids"][kind].get<std::vector<int32_t>>();
  static const std::map<std::string, const nlohmann::json*> by_text = [] {
    std::map<std::string, const nlohmann::json*> m;
    for (const auto& e : expected()["cases"]) m.emplace(e["text"].get<std::string>(), &e);
    return m;
  }();
  const auto it = by_text.find(c["text"].get<std::string>());
  REQUIRE(it != by_text.end());
  return (*it->second)["ids"][kind].get<std::vector<int32_t>>();
}

std::vector<std::string> all_kinds() {
  std::vector<std::string> v(std::begin(kKinds), std::end(kKinds));
  v.insert(v.end(), std::begin(kExtraKinds), std::end(kExtraKinds));
  return v;
}

TEST_CASE("HF tokenizer.json: added tokens with lstrip, rstrip, single_word and normalized contents match HF "
          "tokenizers ID for ID") {
  const auto& doc = extras();
  REQUIRE(doc["cases"].size() >= 350);
  for (const char* kind : kExtraKinds) {
    INFO("file: " << kind);
    auto tok = make_hf_tokenizer(kHfFixtures + kind + ".tokenizer.json");
    CHECK(tok->vocab_size() == doc["files"][kind]["vocab_size"].get<int64_t>());
    int mismatches = 0;
    for (const auto& c : doc["cases"]) {
      const std::string text = c["text"];
      const auto got = encode(*tok, text);
      if (got != plain_ids(c, kind)) {
        ++mismatches;
        INFO("text: \"" << text << "\"");
        CHECK(got == plain_ids(c, kind));
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("HF tokenizer.json: add_special_tokens applies the post-processor's template as HF tokenizers does "
          "(Llama 3's BOS alone and in a Sequence, RoBERTa's, a multi-ID template; none for the others)") {
  const auto& doc = extras();
  int with_template = 0;
  for (const std::string& kind : all_kinds()) {
    INFO("file: " << kind);
    auto tok = make_hf_tokenizer(kHfFixtures + kind + ".tokenizer.json");
    int mismatches = 0;
    for (const auto& c : doc["cases"]) {
      const std::string text = c["text"];
      const auto want = c["ids_special"].contains(kind) ? c["ids_special"][kind].get<std::vector<int32_t>>()
                                                        : plain_ids(c, kind);
      std::vector<int32_t> got;
      tok->encode_with_special_tokens(text, got);
      with_template += c["ids_special"].contains(kind) ? 1 : 0;
      if (got != want) {
        ++mismatches;
        INFO("text: \"" << text << "\"");
        CHECK(got == want);
      }
    }
    CHECK(mismatches == 0);
  }
  CHECK(with_template >= 4 * 350);  // the four template files add IDs to every text
  // The Llama-3-style file puts <|begin_of_text|> (ID 0 there) first and nothing after.
  auto llama = make_hf_tokenizer(kHfFixtures + "llama3_style.tokenizer.json");
  std::vector<int32_t> ids;
  llama->encode_with_special_tokens("Hello", ids);
  CHECK(ids.front() == 0);
  CHECK(std::vector<int32_t>(ids.begin() + 1, ids.end()) == encode(*llama, "Hello"));
}

TEST_CASE("HF tokenizer.json: decode is HF tokenizers' decode byte for byte (bytes joined across tokens, "
          "U+FFFD for invalid UTF-8, added and special tokens, skip_special_tokens)") {
  const auto& doc = extras();
  std::map<std::string, std::unique_ptr<HfTokenizer>> toks;
  for (const std::string& kind : all_kinds()) toks[kind] = make_hf_tokenizer(kHfFixtures + kind + ".tokenizer.json");
  int mismatches = 0, replaced = 0;
  for (const auto& c : doc["cases"]) {
    for (const auto& [kind, tok] : toks) {
      const auto ids = plain_ids(c, kind);
      const std::string want = c["decoded"].contains(kind) ? c["decoded"][kind].get<std::string>() : c["text"].get<std::string>();
      const std::string want_skip = c["decoded_skip"].contains(kind) ? c["decoded_skip"][kind].get<std::string>() : want;
      if (tok->decode(ids) != want || tok->decode(ids, true) != want_skip) {
        ++mismatches;
        INFO("file: " << kind << " text: \"" << c["text"].get<std::string>() << "\"");
        CHECK(tok->decode(ids) == want);
        CHECK(tok->decode(ids, true) == want_skip);
      }
    }
  }
  for (const auto& d : doc["decode"]) {
    const auto& tok = toks.at(d["file"].get<std::string>());
    const auto ids = d["ids"].get<std::vector<int32_t>>();
    const std::string want = d["text"], want_skip = d["text_skip"];
    replaced += want.find("\xef\xbf\xbd") != std::string::npos ? 1 : 0;
    if (tok->decode(ids) != want || tok->decode(ids, true) != want_skip) {
      ++mismatches;
      INFO("file: " << d["file"].get<std::string>() << " ids: " << d["ids"].dump());
      CHECK(tok->decode(ids) == want);
      CHECK(tok->decode(ids, true) == want_skip);
    }
  }
  CHECK(mismatches == 0);
  CHECK(replaced > 50);  // the random sequences do reach invalid UTF-8
}

TEST_CASE("utf8_lossy: one U+FFFD per maximal subpart of an ill-formed sequence") {
  const std::string r = "\xef\xbf\xbd";
  CHECK(utf8_lossy("abc") == "abc");
  CHECK(utf8_lossy("\xe4\xb8\xad") == "\xe4\xb8\xad");
  CHECK(utf8_lossy("\xe4\xb8") == r);                 // truncated: one subpart
  CHECK(utf8_lossy("\xe4\xb8x") == r + "x");
  CHECK(utf8_lossy("\xc0\xaf") == r + r);             // overlong lead: each byte
  CHECK(utf8_lossy("\xed\xa0\x80") == r + r + r);     // a surrogate
  CHECK(utf8_lossy("\xf4\x90\x80\x80") == r + r + r + r);  // past U+10FFFF
  CHECK(utf8_lossy("\xf0\x9f\x98") == r);
  CHECK(utf8_lossy("\xf0\x9f\x98\x80\x80") == "\xf0\x9f\x98\x80" + r);
  CHECK(utf8_lossy("\xff\xfe") == r + r);
}

TEST_CASE("HF tokenizer.json: real files (TROUPE_HF_TOKENIZER_FILES)") {
  const char* dir = std::getenv("TROUPE_HF_TOKENIZER_FILES");
  if (dir == nullptr || !std::filesystem::is_directory(dir)) {
    MESSAGE("TROUPE_HF_TOKENIZER_FILES not set: real tokenizer.json files (GPT-2's, Llama 3's) not checked; "
            "tools/data_hf_tokenizer_reference.py expected writes their NAME.expected.json");
    return;
  }
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    const std::string suffix = ".tokenizer.json";
    if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string expected_path = path.substr(0, path.size() - suffix.size()) + ".expected.json";
    if (!std::filesystem::exists(expected_path)) continue;
    ++files;
    INFO("file: " << path);
    const auto doc = read_json(expected_path);
    auto tok = make_hf_tokenizer(path);
    CHECK(tok->vocab_size() == doc["vocab_size"].get<int64_t>());
    for (const auto& c : doc["cases"]) {
      const std::string text = c["text"];
      INFO("text: \"" << text << "\"");
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      CHECK(encode(*tok, text) == ids);
      if (c.contains("ids_special")) {  // files written before these fields have only "ids"
        std::vector<int32_t> special;
        tok->encode_with_special_tokens(text, special);
        CHECK(special == c["ids_special"].get<std::vector<int32_t>>());
        CHECK(tok->decode(ids) == c["decoded"].get<std::string>());
      }
    }
  }
  CHECK(files > 0);
}

TEST_CASE("HF tokenizer.json: the end-of-document token and its override") {
  auto llama = make_hf_tokenizer(kHfFixtures + "llama3_style.tokenizer.json");
  CHECK(llama->eod_token() == "<|end_of_text|>");  // not <|begin_of_text|>, the other special
  auto bos = make_hf_tokenizer(kHfFixtures + "llama3_style.tokenizer.json", 0);
  CHECK(bos->eod() == 0);
  CHECK(bos->eod_token() == "<|begin_of_text|>");
  CHECK_THROWS_WITH_AS(make_hf_tokenizer(kHfFixtures + "llama3_style.tokenizer.json", 901),
                       (kHfFixtures + "llama3_style.tokenizer.json: the end-of-document ID 901 is outside the "
                                      "vocabulary [0, 901)").c_str(),
                       DataError);
  ScratchDir d;
  const std::string none = variant(d, "none.json", [](nlohmann::json& j) {
    j["added_tokens"] = nlohmann::json::array();
    j["model"]["vocab"].erase("<|endoftext|>");
  });
  CHECK(load_error(none) == none + ": no end-of-document token: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> "
                                   "is in the file; name its ID with data.eod_id (prepare-data --eod-id)");
}

TEST_CASE("HF tokenizer.json: files of other kinds are refused, naming the kind and the file") {
  ScratchDir d;
  const std::string unigram = variant(d, "unigram.json", [](nlohmann::json& j) {
    j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", {{"<unk>", 0.0}}}};
  });
  CHECK(load_error(unigram) == unigram + ": model type Unigram (a SentencePiece unigram model) is not supported: "
                                         "troupe reads byte-level BPE tokenizer.json files (model type BPE)");
  const std::string wordpiece = variant(d, "wp.json", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; });
  CHECK(load_error(wordpiece).find(wordpiece + ": model type WordPiece (a BERT-style model) is not supported") == 0);
  const std::string meta = variant(d, "meta.json", [](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}};
  });
  CHECK(load_error(meta) == meta + ": pre_tokenizer: pre-tokenizer Metaspace is not supported (troupe reads "
                                   "byte-level BPE files: ByteLevel, alone or after Split and Digits)");
  const std::string nfkc = variant(d, "nfkc.json", [](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; });
  CHECK(load_error(nfkc).find(nfkc + ": normalizer NFKC is not supported") == 0);
  const std::string fallback = variant(d, "fb.json", [](nlohmann::json& j) { j["model"]["byte_fallback"] = true; });
  CHECK(load_error(fallback).find(fallback + ": model.byte_fallback is true") == 0);
  const std::string no_byte = variant(d, "nobyte.json", [](nlohmann::json& j) { j["model"]["vocab"].erase("!"); });
  CHECK(load_error(no_byte).find(no_byte + ": model.vocab has no entry for byte 33 (\"!\")") == 0);
  const std::string overlap = variant(d, "overlap.json", [](nlohmann::json& j) {
    j["added_tokens"][0]["rstrip"] = true;
    j["added_tokens"].push_back({{"id", 900}, {"content", " x"}, {"special", true}, {"normalized", false}});
  });
  CHECK(load_error(overlap) == overlap + ": added token \" x\" starts with whitespace and an added token of the same "
                                         "pass sets rstrip: HF matches them overlapping, which troupe does not support");
  const std::string template_b = variant(d, "template_b.json", [](nlohmann::json& j) {
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"Sequence", {{"id", "B"}, {"type_id", 0}}}}}},
                           {"special_tokens", nlohmann::json::object()}};
  });
  CHECK(load_error(template_b) == template_b + ": post_processor.single[0]: a single-sequence template holds the "
                                               "sequence $A once (got {\"id\":\"B\",\"type_id\":0})");
  const std::string unknown_special = variant(d, "unknown_special.json", [](nlohmann::json& j) {
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"special_tokens", nlohmann::json::object()}};
  });
  CHECK(load_error(unknown_special) == unknown_special + ": post_processor.single[0]: special token \"<s>\" is not in "
                                                         "post_processor.special_tokens with its ids");
  // A post-processor troupe does not apply loads (prepare-data needs none) and is
  // refused, named, where its special tokens are asked for; so is a decoder.
  const std::string other_post = variant(d, "other_post.json", [](nlohmann::json& j) {
    j["post_processor"] = {{"type", "Sequence"}, {"processors", {{{"type", "ByteLevel"}}, {{"type", "FancyProcessing"}}}}};
    j["decoder"] = {{"type", "Metaspace"}};
  });
  auto other = make_hf_tokenizer(other_post);
  CHECK(encode(*other, "hi") == encode(*make_hf_tokenizer(kHfFixtures + "gpt2_style.tokenizer.json"), "hi"));
  std::vector<int32_t> ids;
  CHECK_THROWS_WITH_AS(other->encode_with_special_tokens("hi", ids),
                       (other_post + ": post_processor.processors[1]: post-processor FancyProcessing is not supported "
                                     "(troupe applies TemplateProcessing, BertProcessing, RobertaProcessing and ByteLevel, "
                                     "alone or in a Sequence)").c_str(),
                       DataError);
  CHECK_THROWS_WITH_AS(other->decode({1, 2}),
                       (other_post + ": decoder Metaspace is not supported (troupe decodes with ByteLevel, the decoder "
                                     "of byte-level BPE files)").c_str(),
                       DataError);
  const std::string regex = variant(d, "regex.json", [](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", "a*?"}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  });
  CHECK(load_error(regex).find(regex + ": pre_tokenizer.pretokenizers[0]: regex \"a*?\": a lazy quantifier at offset 2") == 0);
  const std::string merged = variant(d, "merged.json", [](nlohmann::json& j) {
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}};
  });
  CHECK(load_error(merged) == merged + ": pre_tokenizer: Split behavior \"MergedWithPrevious\" is not supported "
                                       "(troupe splits Isolated only)");
  const std::string bad_merge = variant(d, "badmerge.json", [](nlohmann::json& j) { j["model"]["merges"][3] = "zzq x"; });
  CHECK(load_error(bad_merge) == bad_merge + ": model.merges[3]: \"zzq\" is not in model.vocab");
}

TEST_CASE("HF tokenizer.json: bad JSON names the file and the byte offset; a FIFO is refused") {
  ScratchDir d;
  write_text(d / "bad.json", "{\"model\": {\"type\": \"BPE\",,}}");
  CHECK(load_error(d / "bad.json").find(d / "bad.json" + ": invalid JSON at byte 26: ") == 0);
  CHECK(load_error(d / "missing.json") ==
        d / "missing.json" + ": cannot open the Hugging Face tokenizer (tokenizer.json): No such file or directory");
  make_fifo(d / "fifo.json");
  CHECK(load_error(d / "fifo.json") ==
        d / "fifo.json" + ": Hugging Face tokenizer (tokenizer.json) is a FIFO, not a regular file");
  write_text(d / "array.json", "[1, 2]");
  CHECK(load_error(d / "array.json") == d / "array.json" + ": not a tokenizer.json (expected a JSON object)");
}

TEST_CASE("HF tokenizer.json: a long run of letters and one of spaces encode (no deep recursion)") {
  auto tok = make_hf_tokenizer(kHfFixtures + "llama3_style.tokenizer.json");
  std::string run;
  uint32_t x = 1;
  for (int i = 0; i < 300000; ++i) {
    x = x * 1664525u + 1013904223u;
    run += "etaoinshrdlu"[(x >> 24) % 12];
  }
  const auto ids = encode(*tok, run + std::string(100000, ' ') + "x");
  CHECK(ids.size() > 300000 / 8);
  CHECK(ids.size() < 300000);
}

TEST_CASE("pre-tokenizer regex: random patterns compile or are refused with one DataError; a compiled one splits "
          "random text into non-empty pieces that concatenate back to it") {
  std::mt19937 rng(11);
  const std::vector<std::string> atoms = {"a", "b", "'", "\\s", "\\S", "\\p{L}", "\\p{N}", "[^\\s\\p{L}]", "[a-c]",
                                          ".", "(", ")", "(?:", "(?i:", "(?!", "(?=", "|", "?", "*", "+", "{1,3}",
                                          "{2}", "\\r", "\\n", " ", "[", "]", "\\", "^", "{", "x", "\\x{4e2d}"};
  const std::vector<std::string> chars = {"a", "b", "A", "'", " ", "  ", "\t", "\n", "1", "23", "\xc3\xa9", "\xe4\xb8\xad",
                                          "\xf0\x9f\x98\x80", "!", "\xff", "x"};
  int compiled = 0, refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string pattern;
    for (int k = 1 + int(rng() % 12); k > 0; --k) pattern += atoms[rng() % atoms.size()];
    std::optional<PreTokenizerRegex> re;
    try {
      re.emplace(pattern, "random");
    } catch (const DataError& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind("random: regex \"", 0) == 0);
      continue;
    }
    ++compiled;
    for (int t = 0; t < 4; ++t) {
      std::string text;
      for (int k = int(rng() % 20); k > 0; --k) text += chars[rng() % chars.size()];
      DecodedText scratch;
      std::vector<std::pair<size_t, size_t>> ranges;
      re->split_isolated(text, scratch, ranges);
      std::string joined;
      for (const auto& [b, e] : ranges) {
        CHECK(e > b);
        joined += text.substr(b, e - b);
      }
      INFO("pattern " << pattern << " text " << text);
      CHECK(joined == text);
    }
  }
  MESSAGE("random patterns: " << compiled << " compiled, " << refused << " refused");
  CHECK(compiled > 200);
  CHECK(refused > 200);
  CHECK(regex_error(std::string(5000, 'a')).find("a pattern of 5000 bytes, more than 4096 at offset 0") !=
        std::string::npos);
  CHECK(regex_error(std::string(40, '(') + "a" + std::string(40, ')')).find("groups nested more than 32 deep") !=
        std::string::npos);
}

TEST_CASE("HF tokenizer.json: damaged files load or are refused with one DataError naming the file") {
  ScratchDir d;
  const std::string original = read_text(kHfFixtures + "gpt2_style.tokenizer.json");
  const nlohmann::json parsed = nlohmann::json::parse(original);
  std::mt19937 rng(5);
  const std::vector<nlohmann::json> values = {nullptr, 0, -1, 3, 2147483648LL, "x", "", true,
                                              nlohmann::json::array(), nlohmann::json::object(),
                                              nlohmann::json::array({"a", "b"}), {{"type", "BPE"}}};
  const std::vector<nlohmann::json::json_pointer> paths = {
      "/model"_json_pointer, "/model/type"_json_pointer, "/model/vocab"_json_pointer, "/model/vocab/a"_json_pointer,
      "/model/merges"_json_pointer, "/model/merges/0"_json_pointer, "/model/ignore_merges"_json_pointer,
      "/model/byte_fallback"_json_pointer, "/model/dropout"_json_pointer, "/pre_tokenizer"_json_pointer,
      "/pre_tokenizer/type"_json_pointer, "/pre_tokenizer/use_regex"_json_pointer, "/normalizer"_json_pointer,
      "/added_tokens"_json_pointer, "/added_tokens/0"_json_pointer, "/added_tokens/0/id"_json_pointer,
      "/added_tokens/0/content"_json_pointer, "/added_tokens/1/normalized"_json_pointer};
  int loaded = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text;
    if (i % 3 == 0) {  // bytes: cut, flipped or dropped
      text = original;
      const size_t at = rng() % text.size();
      if (rng() % 2) text.resize(at);
      else text[at] = char(rng() % 256);
    } else {  // structure: one to three fields given another value
      nlohmann::json j = parsed;
      for (int k = 1 + int(rng() % 3); k > 0; --k) {
        try {
          j[paths[rng() % paths.size()]] = values[rng() % values.size()];
        } catch (const nlohmann::json::exception&) {  // the parent is no longer a container
        }
      }
      text = j.dump();
    }
    std::string name = std::to_string(i);
    name += ".json";  // (not "t" + ...: GCC 12 warns -Wrestrict on that falsely)
    const std::string path = d / name;
    write_text(path, text);
    try {
      auto tok = make_hf_tokenizer(path);
      ++loaded;
      const auto ids = encode(*tok, "Hello, world! <|endoftext|> 123 \xe4\xb8\xad");
      for (const int32_t id : ids) CHECK((id >= 0 && id < tok->vocab_size()));
    } catch (const DataError& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);
    }
  }
  MESSAGE("damaged tokenizer.json: " << loaded << " loaded, " << refused << " refused");
  CHECK(refused > 100);
}
