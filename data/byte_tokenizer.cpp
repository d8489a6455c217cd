// The built-in tokenizer of the embedded default: each byte is its own ID; and
// make_tokenizer, the choice by name.
#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "data/unicode_text.h"

namespace troupe::data {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
  void encode(std::string_view text, std::vector<int32_t>& out) override {
    const size_t base = out.size();
    out.resize(base + text.size());
    int32_t* dst = out.data() + base;
    for (size_t i = 0; i < text.size(); ++i) dst[i] = int32_t(static_cast<unsigned char>(text[i]));
  }
  // As the tokenizer.json an export writes for it decodes (data/hf_tokenizer_files.h):
  // 256 is the special token <|endoftext|>.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (const int32_t id : ids) {
      if (id >= 0 && id < 256) bytes += char(id);
      else if (id == 256 && !skip_special_tokens) bytes += "<|endoftext|>";
    }
    return utf8_lossy(bytes);
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  // Files or an EOD meant for another tokenizer are a mistake, not something to ignore.
  if (spec.name != "gpt2" && (!spec.vocab_json.empty() || !spec.merges_txt.empty()))
    throw DataError("a vocab.json and merges.txt (--vocab, --merges) are for tokenizer gpt2, not " + spec.name);
  if (spec.name != "hf" && (!spec.tokenizer_json.empty() || spec.eod_id))
    throw DataError("a tokenizer.json and an EOD ID (--tokenizer-file, --eod-id) are for tokenizer hf, not " + spec.name);
  if (spec.name == "bytes") return make_byte_tokenizer();
  if (spec.name == "gpt2") {
    if (spec.vocab_json.empty() || spec.merges_txt.empty()) {
      throw DataError("tokenizer gpt2 needs a vocab.json and a merges.txt (--vocab, --merges)");
    }
    return make_gpt2_tokenizer(spec.vocab_json, spec.merges_txt);
  }
  if (spec.name == "hf") {
    if (spec.tokenizer_json.empty()) throw DataError("tokenizer hf needs a tokenizer.json (--tokenizer-file)");
    return make_hf_tokenizer(spec.tokenizer_json, spec.eod_id);
  }
  throw DataError("unknown tokenizer '" + spec.name + "' (expected bytes, gpt2 or hf)");
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_json,
                                          const std::string& merges_txt) {
  return make_tokenizer(TokenizerSpec{name, vocab_json, merges_txt, "", std::nullopt});
}

}  // namespace troupe::data
