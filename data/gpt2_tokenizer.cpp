// GPT-2 byte-level BPE from vocab.json + merges.txt: GPT-2's pre-tokenizer
// (gpt2_pretokenize.h), then the merges of data/byte_level_bpe.h.
#include <algorithm>
#include <array>
#include <climits>
#include <memory>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/byte_level_bpe.h"
#include "data/error.h"
#include "data/gpt2_pretokenize.h"
#include "data/mapped_file.h"
#include "data/tokenizer.h"
#include "data/unicode_text.h"

namespace troupe::data {
namespace {

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
    token_of_id_.resize(size_t(vocab_size_));
    for (const auto& [token, id] : vocab) token_of_id_[size_t(id)] = token;
    const auto eod = vocab.find("<|endoftext|>");
    if (eod == vocab.end()) throw DataError(vocab_path + ": no \"<|endoftext|>\" entry (GPT-2's EOD)");
    eod_ = eod->second;

    const auto& stand_ins = byte_stand_ins();
    std::array<int32_t, 256> byte_id{};
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab.find(stand_ins[size_t(b)]);
      if (it == vocab.end()) {
        throw DataError(vocab_path + ": no entry for byte " + std::to_string(b) + " (\"" +
                        stand_ins[size_t(b)] + "\"): not a byte-level BPE vocabulary");
      }
      byte_id[size_t(b)] = it->second;
    }
    bpe_ = std::make_unique<ByteLevelBpe>(byte_id);

    const std::string merges = read_whole(merges_path, "merges (merges.txt)");
    std::istringstream lines(merges);
    std::string line;
    int64_t line_no = 0;
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
      bpe_->add_merge(ia->second, ib->second, iab->second);
    }
  }

  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }

  void encode(std::string_view text, std::vector<int32_t>& out) override {
    pieces_.clear();
    gpt2_pretokenize(text, pieces_);
    for (const std::string_view piece : pieces_) bpe_->encode_piece(piece, out);
  }

  // transformers' GPT2Tokenizer (and the tokenizer.json it converts to): <|endoftext|>
  // is its one special token.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string bytes, token_bytes;
    for (const int32_t id : ids) {
      if (id < 0 || id >= vocab_size_ || (skip_special_tokens && id == eod_)) continue;
      const std::string& token = token_of_id_[size_t(id)];
      bytes += stand_in_bytes(token, token_bytes) ? token_bytes : token;
    }
    return utf8_lossy(bytes);
  }

 private:
  std::vector<std::string> token_of_id_;  // "" for an ID vocab.json skips
  std::unique_ptr<ByteLevelBpe> bpe_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = 0;
  std::vector<std::string_view> pieces_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json,
                                               const std::string& merges_txt) {
  return std::make_unique<Gpt2Tokenizer>(vocab_json, merges_txt);
}

}  // namespace troupe::data
