// The tokenizer files `supervisor export` writes (data/hf_tokenizer_files.h): each
// exported tokenizer.json, read back with troupe's tokenizer.json reader (itself checked
// against HF tokenizers in hf_tokenizer_test.cpp), encodes as the run's tokenizer did.
// With TROUPE_HF_PYTHON naming a Python that has `tokenizers` (the venv
// tools/data_hf_tokenizer_reference.py makes: build/hf-tokenizers-venv/bin/python), HF
// itself checks the exported files too (and transformers' AutoTokenizer when installed).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/error.h"
#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_files.h"
#include "data/tokenizer.h"
#include "test/data/helpers.h"

using namespace troupe::data;
using namespace troupe::data::testing;
using troupe::Config;
using troupe::DataConfig;

namespace {

const std::string kFixtures = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/";

// Sample strings without "<|endoftext|>" (exported BYTES and GPT2 tokenizers read it as
// the special token unless told otherwise; checked on its own below).
std::vector<std::string> samples() {
  std::vector<std::string> out = {"Hello world", "I'm here, they'll see", "  spaces\tand\nlines\r\n",
                                  "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "digits 1234567890",
                                  "def f(x):\n    return x ** 2\n", "", "a"};
  const auto doc = nlohmann::json::parse(std::ifstream(kFixtures + "gpt2_expected.json"));
  for (const auto& c : doc["cases"]) {
    const std::string t = c["text"];
    if (t.find("<|endoftext|>") == std::string::npos) out.push_back(t);
  }
  return out;
}

std::vector<int32_t> encode(Tokenizer& t, std::string_view s) {
  std::vector<int32_t> ids;
  t.encode(s, ids);
  return ids;
}

std::string file_of(const TokenizerExport& e, const std::string& name) {
  for (const auto& [n, bytes] : e.files)
    if (n == name) return bytes;
  FAIL("no " << name << " in the export");
  return "";
}

std::vector<std::string> names(const TokenizerExport& e) {
  std::vector<std::string> out;
  for (const auto& f : e.files) out.push_back(f.first);
  return out;
}

// Writes the export into dir/NAME with troupe_ids.json (what the run's tokenizer makes of
// each sample) for the HF check, and checks that troupe's reader of the exported
// tokenizer.json agrees with the run's tokenizer.
void check_export(const TokenizerExport& e, Tokenizer& run_tokenizer, const ScratchDir& dir, const std::string& name) {
  std::filesystem::create_directories(dir / name);
  const auto paths = write_tokenizer_export(e, dir / name);
  CHECK(paths.size() == e.files.size());
  auto exported = make_hf_tokenizer(dir / (name + "/tokenizer.json"));
  CHECK(exported->eod() == run_tokenizer.eod());
  nlohmann::json cases = nlohmann::json::array();
  for (const std::string& s : samples()) {
    INFO(name << ": \"" << s << "\"");
    const auto want = encode(run_tokenizer, s);
    CHECK(encode(*exported, s) == want);
    cases.push_back({{"text", s}, {"ids", want}});
  }
  write_text(dir / (name + "/troupe_ids.json"), nlohmann::json{{"cases", cases}}.dump());
}

Config run_config(DataConfig::Tokenizer t) {
  Config c;
  c.mutable_data()->set_tokenizer(t);
  c.mutable_model()->set_max_positions(512);
  return c;
}

}  // namespace

TEST_CASE("exported tokenizer files encode as the run's tokenizer (bytes, GPT-2, tokenizer.json)") {
  ScratchDir dir;

  const TokenizerExport bytes = hf_tokenizer_export(run_config(DataConfig::BYTES));
  CHECK(names(bytes) == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"});
  auto byte_tok = make_byte_tokenizer();
  check_export(bytes, *byte_tok, dir, "bytes");
  const auto bytes_config = nlohmann::json::parse(file_of(bytes, "tokenizer_config.json"));
  CHECK(bytes_config["eos_token"] == "<|endoftext|>");
  CHECK(bytes_config["split_special_tokens"] == true);
  CHECK(bytes_config["model_max_length"] == 512);
  CHECK(make_hf_tokenizer(dir / "bytes/tokenizer.json")->vocab_size() == 257);

  Config gpt2 = run_config(DataConfig::GPT2);
  const std::string k8000 = kFixtures + "gpt2_k8000";
  gpt2.mutable_data()->set_vocab_file(k8000 + "/vocab.json");
  gpt2.mutable_data()->set_merges_file(k8000 + "/merges.txt");
  const TokenizerExport g = hf_tokenizer_export(gpt2);
  CHECK(names(g) == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"});
  CHECK(file_of(g, "vocab.json") == read_text(k8000 + "/vocab.json"));
  CHECK(file_of(g, "merges.txt") == read_text(k8000 + "/merges.txt"));
  auto gpt2_tok = make_gpt2_tokenizer(k8000 + "/vocab.json", k8000 + "/merges.txt");
  check_export(g, *gpt2_tok, dir, "gpt2");
  // The one documented difference: HF's reader matches the special token in text.
  auto exported = make_hf_tokenizer(dir / "gpt2/tokenizer.json");
  CHECK(encode(*exported, "<|endoftext|>") == std::vector<int32_t>{50256});
  CHECK(encode(*gpt2_tok, "<|endoftext|>").size() > 1);
  CHECK(g.notes.back().find("split_special_tokens") != std::string::npos);

  Config hf = run_config(DataConfig::HF_JSON);
  const std::string llama = kFixtures + "hf/llama3_style.tokenizer.json";
  hf.mutable_data()->set_tokenizer_file(llama);
  const TokenizerExport h = hf_tokenizer_export(hf);
  CHECK(names(h) == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"});
  CHECK(file_of(h, "tokenizer.json") == read_text(llama));
  const auto hf_config = nlohmann::json::parse(file_of(h, "tokenizer_config.json"));
  CHECK(hf_config["eos_token"] == "<|end_of_text|>");
  CHECK(!hf_config.contains("split_special_tokens"));
  auto hf_tok = make_hf_tokenizer(llama);
  check_export(h, *hf_tok, dir, "hf_json");
  hf.mutable_data()->set_eod_id(-1);  // spelt out, as in a checkpoint's copy of the config: no override
  CHECK(nlohmann::json::parse(file_of(hf_tokenizer_export(hf), "tokenizer_config.json"))["eos_token"] ==
        "<|end_of_text|>");
  hf.mutable_data()->set_eod_id(0);  // the override names the EOS too
  CHECK(nlohmann::json::parse(file_of(hf_tokenizer_export(hf), "tokenizer_config.json"))["eos_token"] ==
        "<|begin_of_text|>");

  const TokenizerExport none = hf_tokenizer_export(run_config(DataConfig::NONE));
  CHECK(none.files.empty());
  CHECK(none.notes == std::vector<std::string>{"tokenizer: none exported: data.tokenizer NONE (a dataset tokenized "
                                               "elsewhere) has no Hugging Face tokenizer here"});

  const char* python = std::getenv("TROUPE_HF_PYTHON");
  if (python == nullptr || !std::filesystem::exists(python)) {
    MESSAGE("TROUPE_HF_PYTHON not set: exported files not checked with Hugging Face tokenizers "
            "(tools/data_hf_tokenizer_reference.py makes the venv build/hf-tokenizers-venv)");
    return;
  }
  const std::string cmd = std::string(python) + " " + TROUPE_SOURCE_DIR +
                          "/tools/data_hf_tokenizer_reference.py compare-export " + dir.path();
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("tokenizer export: a missing tokenizer file is named, and nothing is built") {
  Config gpt2 = run_config(DataConfig::GPT2);
  gpt2.mutable_data()->set_vocab_file("/nonexistent/vocab.json");
  gpt2.mutable_data()->set_merges_file("/nonexistent/merges.txt");
  CHECK_THROWS_WITH_AS(hf_tokenizer_export(gpt2),
                       "/nonexistent/vocab.json: cannot open the GPT-2 vocabulary (vocab.json): No such file or directory",
                       DataError);
  Config hf = run_config(DataConfig::HF_JSON);
  hf.mutable_data()->set_tokenizer_file("/nonexistent/tokenizer.json");
  CHECK_THROWS_WITH_AS(hf_tokenizer_export(hf),
                       "/nonexistent/tokenizer.json: cannot open the Hugging Face tokenizer (tokenizer.json): No such "
                       "file or directory",
                       DataError);
}
