// prepare-data: input formats, EOD, summary, errors, atomic output, and the
// embedded default corpus.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "data/corpus_reader.h"
#include "data/default_corpus.h"
#include "data/error.h"
#include "data/indexed_dataset.h"
#include "data/dataset_tokenizer.h"
#include "data/prepare.h"
#include "test/data/helpers.h"

using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

std::vector<std::string> docs_of(const std::string& path, InputFormat f) {
  std::vector<std::string> out;
  read_documents(path, f, [&](std::string_view d) { out.emplace_back(d); });
  return out;
}

std::vector<int32_t> bytes_eod(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  v.push_back(256);
  return v;
}

}  // namespace

TEST_CASE("input formats split documents as documented") {
  ScratchDir d;
  write_text(d / "a.txt", "one whole\n\nfile\n");
  CHECK(docs_of(d / "a.txt", InputFormat::Text) == std::vector<std::string>{"one whole\n\nfile\n"});
  CHECK(docs_of(d / "a.txt", InputFormat::BlankLines) == std::vector<std::string>{"one whole\n", "file\n"});

  write_text(d / "b.txt", "\n\npara one\nline two\n \t\n\npara two");
  CHECK(docs_of(d / "b.txt", InputFormat::BlankLines) ==
        std::vector<std::string>{"para one\nline two\n", "para two"});

  write_text(d / "c.jsonl", "{\"text\": \"first\\ndoc\", \"id\": 1}\n\n{\"text\": \"caf\\u00e9\"}\n{\"text\": \"   \"}\n");
  CHECK(docs_of(d / "c.jsonl", InputFormat::Auto) == std::vector<std::string>{"first\ndoc", "caf\xc3\xa9"});

  write_text(d / "fortunes", "A fortune.\n%\nTwo\n  lines.\n%\n%\nLast, no separator\n");
  CHECK(docs_of(d / "fortunes", InputFormat::Auto) ==
        std::vector<std::string>{"A fortune.\n", "Two\n  lines.\n", "Last, no separator\n"});
  CHECK(detect_format(d / "a.txt", read_text(d / "a.txt"), InputFormat::Auto) == InputFormat::Text);
}

TEST_CASE("JSON-lines errors name file, line and offset") {
  ScratchDir d;
  auto err = [&](const std::string& body) {
    write_text(d / "x.jsonl", body);
    try {
      docs_of(d / "x.jsonl", InputFormat::Jsonl);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("{\"text\": \"ok\"}\n{\"text\": oops}\n").find("x.jsonl:2: invalid JSON at column 10 (file offset 24)") != std::string::npos);
  CHECK(err("{\"text\": \"ok\"}\n{\"body\": \"x\"}\n").find("x.jsonl:2: no \"text\" field (file offset 15)") != std::string::npos);
  CHECK(err("{\"text\": 5}\n").find("x.jsonl:1: \"text\" is not a string") != std::string::npos);
}

TEST_CASE("prepare writes each document with EOD and reports a summary") {
  ScratchDir d;
  write_text(d / "f1", "alpha\n%\nbeta\n%\n");
  write_text(d / "f2.jsonl", "{\"text\": \"gamma\"}\n{\"text\": \"\"}\n");
  PrepareOptions o;
  o.inputs = {d / "f1", d / "f2.jsonl"};
  o.output_prefix = d / "out/corpus";
  int progress_calls = 0;
  o.progress = [&](const PrepareProgress&) { ++progress_calls; };
  auto tok = make_byte_tokenizer();
  const PrepareSummary s = prepare_dataset(o, *tok);
  CHECK(s.files == 2);
  CHECK(s.documents == 3);
  CHECK(s.skipped_empty == 1);
  CHECK(s.tokens == 6 + 5 + 5 + 3);
  CHECK(s.dtype == "uint16");
  CHECK(progress_calls >= 1);
  const IndexedDataset ds = IndexedDataset::open(d / "out/corpus");
  REQUIRE(ds.sequences() == 3);
  CHECK(ds.sequence(0) == bytes_eod("alpha\n"));
  CHECK(ds.sequence(1) == bytes_eod("beta\n"));
  CHECK(ds.sequence(2) == bytes_eod("gamma"));
  CHECK(count_temporaries(d / "out") == 0);
  // Beside it, what it was tokenized with.
  const auto t = read_dataset_tokenizer(d / "out/corpus");
  REQUIRE(t.has_value());
  CHECK(t->tokenizer == "bytes");
  CHECK(t->vocab_size == 257);
  CHECK(t->eod == 256);
}

TEST_CASE("prepare with a shuffle seed is deterministic and keeps every document") {
  ScratchDir d;
  std::string body;
  for (int i = 0; i < 50; ++i) body += "fortune " + std::to_string(i) + "\n%\n";
  write_text(d / "f", body);
  PrepareOptions o;
  o.inputs = {d / "f"};
  o.shuffle_seed = 99;
  auto tok = make_byte_tokenizer();
  o.output_prefix = d / "a";
  prepare_dataset(o, *tok);
  o.output_prefix = d / "b";
  prepare_dataset(o, *tok);
  CHECK(read_text(d / "a.bin") == read_text(d / "b.bin"));
  const IndexedDataset ds = IndexedDataset::open(d / "a");
  CHECK(ds.sequences() == 50);
  CHECK(ds.sequence(0) != bytes_eod("fortune 0\n"));  // shuffled
  // Each entry "fortune i\n%\n" loses its 2-byte separator line and gains EOD; 2 bytes a token.
  CHECK(std::filesystem::file_size(d / "a.bin") == 2 * (std::filesystem::file_size(d / "f") - 50));
}

TEST_CASE("prepare errors: missing input, empty corpus, bad line; nothing written") {
  ScratchDir d;
  PrepareOptions o;
  o.output_prefix = d / "out";
  o.inputs = {d / "nope.txt"};
  CHECK(prepare_error(o).find("nope.txt: input does not exist") != std::string::npos);

  write_text(d / "empty", "%\n  \n%\n");
  o.inputs = {d / "empty"};
  o.format = InputFormat::Fortune;
  CHECK(prepare_error(o).find("empty corpus: no document in 1 input file(s)") != std::string::npos);

  write_text(d / "bad.jsonl", "{\"text\": \"fine\"}\n[1, 2]\n");
  o.inputs = {d / "bad.jsonl"};
  o.format = InputFormat::Auto;
  CHECK(prepare_error(o).find("bad.jsonl:2: no \"text\" field") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d / "out.bin"));
  CHECK_FALSE(std::filesystem::exists(d / "out.idx"));
  CHECK(count_temporaries(d.path()) == 0);
}

TEST_CASE("an input named explicitly must be a regular file: a FIFO or device is refused, never read") {
  ScratchDir d;
  make_fifo(d / "pipe");
  PrepareOptions o;
  o.output_prefix = d / "out";
  o.inputs = {d / "pipe"};
  CHECK(prepare_error(o) == d / "pipe" + ": prepare-data input is a FIFO, not a regular file");
  o.inputs = {"/dev/zero"};
  CHECK(prepare_error(o) == "/dev/zero: prepare-data input is a character device, not a regular file");
  CHECK_THROWS_WITH_AS(docs_of(d / "pipe", InputFormat::Text), (d / "pipe" + ": corpus file is a FIFO, not a regular file").c_str(),
                       DataError);
  CHECK_FALSE(std::filesystem::exists(d / "out.bin"));

  // In a listed directory such entries are skipped, as before; a symlink named explicitly is followed.
  std::filesystem::create_directory(d / "in");
  write_text(d / "in/a", "text\n");
  make_fifo(d / "in/fifo");
  CHECK(expand_inputs({d / "in"}, InputFormat::Auto) == std::vector<std::string>{d / "in/a"});
  std::filesystem::create_symlink(d / "in/a", d / "link");
  CHECK(expand_inputs({d / "link"}, InputFormat::Auto) == std::vector<std::string>{d / "link"});
}

TEST_CASE("directories expand to their regular files; fortune format skips .dat and .u8") {
  ScratchDir d;
  std::filesystem::create_directories(d / "fort");
  write_text(d / "fort/b", "x\n%\n");
  write_text(d / "fort/a", "y\n%\n");
  write_text(d / "fort/a.dat", "\x01\x02");
  std::filesystem::create_symlink("a", d / "fort/a.u8");
  CHECK(expand_inputs({d / "fort"}, InputFormat::Fortune) ==
        std::vector<std::string>{d / "fort/a", d / "fort/b"});
  CHECK(expand_inputs({d / "fort"}, InputFormat::Auto).size() == 3);  // symlink skipped
}

TEST_CASE("format auto skips files that are not text, naming each; other formats read them") {
  ScratchDir d;
  std::filesystem::create_directories(d / "in");
  write_text(d / "in/a.txt", "caf\xc3\xa9 au lait\n");
  write_text(d / "in/b.dat", std::string("\0\0\0\x02\0\0\0\x10", 8) + "index");  // strfile-like header
  std::string latin1(200, 'x');
  latin1[10] = '\xe9';  // 1 invalid byte in 200: 0.5%, still text
  write_text(d / "in/c.txt", latin1);
  std::string noise(100, 'y');
  noise[1] = noise[50] = '\xff';  // 2 invalid bytes in 100: 2%
  write_text(d / "in/d.bin", noise);

  CHECK(not_text(read_text(d / "in/a.txt")) == std::nullopt);
  CHECK(not_text(read_text(d / "in/b.dat")) == "a NUL byte at offset 0");
  CHECK(not_text(read_text(d / "in/c.txt")) == std::nullopt);
  CHECK(not_text(read_text(d / "in/d.bin")) == "2 of 100 bytes (2.0%) are not UTF-8, more than 1%");
  CHECK(not_text("\xed\xa0\x80 surrogate, \xc0\xaf overlong, \xf4\x90\x80\x80 past U+10FFFF") ==
        "9 of 46 bytes (19.6%) are not UTF-8, more than 1%");

  PrepareOptions o;
  o.inputs = {d / "in"};
  o.output_prefix = d / "out";
  auto tok = make_byte_tokenizer();
  const PrepareSummary s = prepare_dataset(o, *tok);
  CHECK(s.files == 2);
  CHECK(s.documents == 2);
  CHECK(s.skipped_not_text == std::vector<SkippedFile>{{d / "in/b.dat", "a NUL byte at offset 0"},
                                                       {d / "in/d.bin", "2 of 100 bytes (2.0%) are not UTF-8, "
                                                                        "more than 1%"}});
  const IndexedDataset ds = IndexedDataset::open(d / "out");
  REQUIRE(ds.sequences() == 2);
  CHECK(ds.sequence(0) == bytes_eod("caf\xc3\xa9 au lait\n"));
  CHECK(ds.sequence(1) == bytes_eod(latin1));

  CHECK(docs_of(d / "in/b.dat", InputFormat::Text).size() == 1);  // asked for: read as it is
  o.inputs = {d / "in/b.dat"};
  CHECK(prepare_error(o).find("empty corpus: no document in 1 input file(s) (first: " + (d / "in/b.dat") +
                              "; 1 skipped as not text)") != std::string::npos);
}

TEST_CASE("default corpus: prepared once into the data dir, again when the sources change") {
  ScratchDir d;
  std::filesystem::create_directories(d / "fortunes");
  write_text(d / "fortunes/wisdom", "Know thyself.\n%\nNothing in excess.\n%\n");
  write_text(d / "fortunes/wisdom.dat", "binary");
  std::filesystem::create_symlink("wisdom", d / "fortunes/wisdom.u8");
  const std::string prefix = ensure_default_corpus(d / "fortunes", d / "cache");
  CHECK(prefix == d / "cache/fortunes-bytes");
  CHECK(IndexedDataset::open(prefix).sequences() == 2);
  const auto mtime = std::filesystem::last_write_time(prefix + ".bin");
  CHECK(ensure_default_corpus(d / "fortunes", d / "cache") == prefix);
  CHECK(std::filesystem::last_write_time(prefix + ".bin") == mtime);  // not prepared again

  write_text(d / "fortunes/more", "Third.\n%\n");
  ensure_default_corpus(d / "fortunes", d / "cache");
  CHECK(IndexedDataset::open(prefix).sequences() == 3);
  CHECK(count_temporaries(d / "cache") == 0);

  // Without the fortunes package, a prepared corpus is used as it is.
  CHECK(ensure_default_corpus(d / "no-fortunes-here", d / "cache") == prefix);
  CHECK(IndexedDataset::open(prefix).sequences() == 3);

  ScratchDir none;
  CHECK_THROWS_WITH_AS(ensure_default_corpus(none / "missing", none / "c"),
                       doctest::Contains("needs Debian's fortunes package"), DataError);
}

TEST_CASE("default corpus: a FIFO in place of the .sources listing is replaced, not read") {
  ScratchDir d;
  std::filesystem::create_directories(d / "fortunes");
  write_text(d / "fortunes/wisdom", "Know thyself.\n%\nNothing in excess.\n%\n");
  const std::string prefix = ensure_default_corpus(d / "fortunes", d / "cache");
  std::filesystem::remove(prefix + ".sources");
  make_fifo(prefix + ".sources");
  CHECK(ensure_default_corpus(d / "fortunes", d / "cache") == prefix);
  CHECK(std::filesystem::is_regular_file(prefix + ".sources"));
  CHECK(read_text(prefix + ".sources").find(d / "fortunes/wisdom") != std::string::npos);
  CHECK(IndexedDataset::open(prefix).sequences() == 2);
}

TEST_CASE("default corpus: two preparations racing both succeed and agree") {
  ScratchDir d;
  std::filesystem::create_directories(d / "fortunes");
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "Fortune number " + std::to_string(i) + ".\n%\n";
  write_text(d / "fortunes/many", body);
  std::string a, b;
  std::thread t1([&] { a = ensure_default_corpus(d / "fortunes", d / "cache"); });
  std::thread t2([&] { b = ensure_default_corpus(d / "fortunes", d / "cache"); });
  t1.join();
  t2.join();
  CHECK(a == b);
  const IndexedDataset ds = IndexedDataset::open(a);
  CHECK(ds.sequences() == 2000);
  CHECK(count_temporaries(d / "cache") == 0);
}

TEST_CASE("default corpus from Debian's fortunes, when installed") {
  if (!std::filesystem::exists(std::string(kFortunesDir) + "/fortunes")) {
    MESSAGE("fortunes not installed: skipped");
    return;
  }
  ScratchDir d;
  const std::string prefix = ensure_default_corpus(kFortunesDir, d / "data");
  const IndexedDataset ds = IndexedDataset::open(prefix);
  CHECK(ds.sequences() > 1000);
  CHECK(ds.dtype() == TokenDType::UInt16);
  for (int64_t i = 0; i < ds.sequences(); i += 97) {
    const auto s = ds.sequence(i);
    REQUIRE(s.size() >= 2);
    CHECK(s.back() == 256);
    for (size_t k = 0; k + 1 < s.size(); ++k) CHECK(s[k] < 256);
  }
}

TEST_CASE("prepare-data with a tokenizer.json (tokenizer hf): each document is the file's IDs, then its EOD") {
  ScratchDir d;
  write_text(d / "c.jsonl",
             "{\"text\": \"Hello world, it's me.\"}\n{\"text\": \"x<|end_of_text|>y 12345\"}\n"
             "{\"text\": \"caf\\u00e9 \\u65e5\\u672c \\ud83d\\ude00\"}\n");
  PrepareOptions o;
  o.inputs = {d / "c.jsonl"};
  o.output_prefix = d / "hf";
  const std::string file = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/hf/llama3_style.tokenizer.json";
  auto tok = make_tokenizer(TokenizerSpec{"hf", "", "", file, std::nullopt});
  const PrepareSummary s = prepare_dataset(o, *tok);
  CHECK(s.documents == 3);
  CHECK(s.dtype == "uint16");  // 901 IDs
  const IndexedDataset ds = IndexedDataset::open(d / "hf");
  REQUIRE(ds.sequences() == 3);
  const std::vector<std::string> docs = docs_of(d / "c.jsonl", InputFormat::Jsonl);
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<int32_t> want;
    tok->encode(docs[size_t(i)], want);
    want.push_back(1);  // <|end_of_text|>
    CHECK(ds.sequence(i) == want);
  }
  // The special token inside the text is one ID (HF's behaviour), not its characters.
  const auto second = ds.sequence(1);
  CHECK(std::count(second.begin(), second.end(), 1) == 2);
  CHECK(ds.sequence(0).front() != 0);  // no BOS by default, as Megatron's preprocessing

  // --add-special-tokens: each document as HF's tokenizer(doc), the template's BOS
  // (<|begin_of_text|>, ID 0) first, then EOD.
  o.output_prefix = d / "hf-bos";
  o.add_special_tokens = true;
  prepare_dataset(o, *tok);
  const IndexedDataset bos = IndexedDataset::open(d / "hf-bos");
  REQUIRE(bos.sequences() == 3);
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<int32_t> want = {0};
    tok->encode(docs[size_t(i)], want);
    want.push_back(1);
    CHECK(bos.sequence(i) == want);
  }

  CHECK_THROWS_WITH_AS(make_tokenizer(TokenizerSpec{"hf", "", "", "", std::nullopt}),
                       "tokenizer hf needs a tokenizer.json (--tokenizer-file)", DataError);
  CHECK_THROWS_WITH_AS(make_tokenizer(TokenizerSpec{"bytes", "", "", file, std::nullopt}),
                       "a tokenizer.json and an EOD ID (--tokenizer-file, --eod-id) are for tokenizer hf, not bytes",
                       DataError);
  CHECK_THROWS_WITH_AS(make_tokenizer(TokenizerSpec{"gpt2", "v.json", "m.txt", "", 5}),
                       "a tokenizer.json and an EOD ID (--tokenizer-file, --eod-id) are for tokenizer hf, not gpt2",
                       DataError);
  CHECK_THROWS_WITH_AS(make_tokenizer(TokenizerSpec{"hf", "v.json", "", file, std::nullopt}),
                       "a vocab.json and merges.txt (--vocab, --merges) are for tokenizer gpt2, not hf", DataError);
}
