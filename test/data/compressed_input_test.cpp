// Compressed corpora (data/compressed_input.h): .jsonl.gz and .jsonl.zst read as the
// same documents as the plain .jsonl, whatever the chunk boundaries; members and frames
// one after another; damaged and truncated files refused naming the file and the
// compressed offset; prepare-data's output byte for byte the plain file's, on one
// thread or several.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>

#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/compressed_input.h"
#include "data/corpus_reader.h"
#include "data/error.h"
#include "data/prepare.h"
#include "test/data/helpers.h"

using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

std::string gzip(const std::string& in, int level = 6) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(in.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& in, int level = 3) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), level);
  REQUIRE(!ZSTD_isError(n));
  out.resize(n);
  return out;
}

// About 3 MB of JSON lines of uneven lengths: lines cross the 1 MiB pieces the
// decompressors hand on.
std::string corpus() {
  std::string s;
  for (int i = 0; i < 6000; ++i) {
    std::string text = "document " + std::to_string(i) + ":";
    for (int k = 0; k < (i * 37) % 900; ++k) text += char('a' + (i + k) % 26);
    s += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + text + "\"}\n";
    if (i % 500 == 0) s += "\n";  // blank lines are skipped
  }
  return s;
}

std::vector<std::string> docs_of(const std::string& path, InputFormat f, size_t* bytes = nullptr) {
  std::vector<std::string> out;
  read_documents(path, f, [&](std::string_view d) { out.emplace_back(d); },
                 [&](size_t n) {
                   if (bytes) *bytes += n;
                 });
  return out;
}

std::string error_of(const std::string& path, InputFormat f = InputFormat::Auto) {
  try {
    docs_of(path, f);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("gzip and zstd JSON lines give the plain file's documents; progress counts the compressed bytes") {
  ScratchDir d;
  const std::string text = corpus();
  write_text(d / "c.jsonl", text);
  write_text(d / "c.jsonl.gz", gzip(text));
  write_text(d / "c.jsonl.zst", zstd(text));
  write_text(d / "c.ndjson.zstd", zstd(text, 19));
  const auto want = docs_of(d / "c.jsonl", InputFormat::Auto);
  REQUIRE(want.size() == 6000);
  CHECK(compression_of(read_text(d / "c.jsonl.gz")) == Compression::Gzip);
  CHECK(compression_of(read_text(d / "c.jsonl.zst")) == Compression::Zstd);
  CHECK(compression_of(text) == Compression::None);
  for (const char* name : {"c.jsonl.gz", "c.jsonl.zst", "c.ndjson.zstd"}) {
    CAPTURE(name);
    size_t bytes = 0;
    CHECK(docs_of(d / name, InputFormat::Auto, &bytes) == want);
    CHECK(bytes == std::filesystem::file_size(d / name));
    CHECK(docs_of(d / name, InputFormat::Jsonl) == want);
  }
}

TEST_CASE("gzip members and zstd frames one after another read as one stream") {
  ScratchDir d;
  const std::string a = "{\"text\": \"first\"}\n{\"text\": \"sec", b = "ond\"}\n{\"text\": \"third\"}\n";
  write_text(d / "m.jsonl.gz", gzip(a) + gzip(b));
  write_text(d / "m.jsonl.zst", zstd(a) + zstd(b));
  const std::vector<std::string> want{"first", "second", "third"};
  CHECK(docs_of(d / "m.jsonl.gz", InputFormat::Auto) == want);
  CHECK(docs_of(d / "m.jsonl.zst", InputFormat::Auto) == want);
}

TEST_CASE("damaged, truncated or misnamed compressed inputs are refused, naming the file and the offset") {
  ScratchDir d;
  const std::string text = corpus();
  const std::string gz = gzip(text), zs = zstd(text);
  write_text(d / "cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  CHECK(error_of(d / "cut.jsonl.gz").find(std::string(d / "cut.jsonl.gz") + ": gzip: the data ends inside a member") !=
        std::string::npos);
  write_text(d / "cut.jsonl.zst", zs.substr(0, zs.size() / 2));
  CHECK(error_of(d / "cut.jsonl.zst").find(std::string(d / "cut.jsonl.zst") + ": zstd: ") != std::string::npos);
  CHECK(error_of(d / "cut.jsonl.zst").find("at compressed offset") != std::string::npos);
  std::string bad = gz;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 64; ++i) bad[i] = char(~bad[i]);
  write_text(d / "bad.jsonl.gz", bad);
  // The damage decodes into text that is not JSON first; gzip's check at the member's
  // end is what names it.
  const std::string bad_gz = error_of(d / "bad.jsonl.gz");
  CAPTURE(bad_gz);
  CHECK(bad_gz.rfind(std::string(d / "bad.jsonl.gz") + ": gzip: ", 0) == 0);
  CHECK(bad_gz.find("(the text read wrong before: ") != std::string::npos);
  std::string bad_zs = zs;
  for (size_t i = bad_zs.size() / 3; i < bad_zs.size() / 3 + 64; ++i) bad_zs[i] = char(~bad_zs[i]);
  write_text(d / "bad.jsonl.zst", bad_zs);
  CHECK(error_of(d / "bad.jsonl.zst").find(std::string(d / "bad.jsonl.zst") + ": zstd: ") != std::string::npos);
  // Compressed text is JSON lines only.
  write_text(d / "notes.txt.gz", gzip("plain text\n"));
  CHECK(error_of(d / "notes.txt.gz").find("a gzip file is read as JSON lines: name it .jsonl.gz or .jsonl.zst") !=
        std::string::npos);
  CHECK(error_of(d / "notes.txt.gz", InputFormat::Text).find("a gzip file is read as JSON lines only, not as text") !=
        std::string::npos);
  // Parquet is read as Parquet only (through pyarrow in a Python child: test/cli/parquet.sh),
  // and --format parquet reads nothing else.
  write_text(d / "t.parquet", std::string("PAR1\x15\x04", 6) + std::string(64, '\0') + "PAR1");
  for (const auto f : {InputFormat::Jsonl, InputFormat::Text})
    CHECK(error_of(d / "t.parquet", f).find("t.parquet: a Parquet file is read as Parquet only, not as ") !=
          std::string::npos);
  CHECK(error_of(d / "notes.txt.gz", InputFormat::Parquet).find("not a Parquet file (no PAR1 magic at its start)") !=
        std::string::npos);
  ::setenv("TROUPE_PYTHON", (d / "no-such-python").c_str(), 1);
  const std::string no_python = error_of(d / "t.parquet", InputFormat::Auto);
  ::unsetenv("TROUPE_PYTHON");
  CHECK(no_python.find("t.parquet: a Parquet file is read by pyarrow in a Python child, but " + (d / "no-such-python") +
                       " could not be started: No such file or directory") != std::string::npos);
  // A JSON error inside names the line and where it starts in the decompressed text.
  write_text(d / "j.jsonl.zst", zstd("{\"text\": \"ok\"}\n{\"text\": oops}\n"));
  CHECK(error_of(d / "j.jsonl.zst").find("j.jsonl.zst:2: invalid JSON at column 10 (decompressed offset 24)") !=
        std::string::npos);
}

TEST_CASE("prepare-data writes the same dataset from .jsonl, .jsonl.gz and .jsonl.zst") {
  ScratchDir d;
  const std::string text = corpus();
  write_text(d / "c.jsonl", text);
  write_text(d / "c.jsonl.gz", gzip(text));
  write_text(d / "c.jsonl.zst", zstd(text));
  auto tok = make_byte_tokenizer();
  std::vector<std::string> bins, idxs;
  for (const char* name : {"c.jsonl", "c.jsonl.gz", "c.jsonl.zst"}) {
    PrepareOptions o;
    o.inputs = {d / name};
    o.output_prefix = d / (std::string("out-") + name);
    const PrepareSummary s = prepare_dataset(o, *tok);
    CHECK(s.documents == 6000);
    CHECK(s.input_bytes == int64_t(std::filesystem::file_size(d / name)));
    bins.push_back(read_text(o.output_prefix + ".bin"));
    idxs.push_back(read_text(o.output_prefix + ".idx"));
  }
  CHECK(bins[1] == bins[0]);
  CHECK(bins[2] == bins[0]);
  CHECK(idxs[1] == idxs[0]);
  CHECK(idxs[2] == idxs[0]);
}

TEST_CASE("prepare-data on several threads writes the dataset one thread writes; a failing file is named") {
  ScratchDir d;
  const std::string text = corpus();
  std::vector<std::string> inputs;
  for (int i = 0; i < 5; ++i) {
    // Files of different sizes, finishing out of order on threads.
    const std::string part = text.substr(0, text.size() / size_t(1 + (i * 3) % 5));
    const std::string cut = part.substr(0, part.rfind('\n') + 1);
    std::string name = "f";
    name += std::to_string(i);
    name += i % 2 ? ".jsonl.zst" : ".jsonl";
    write_text(d / name, i % 2 ? zstd(cut) : cut);
    inputs.push_back(d / name);
  }
  write_text(d / "f5.dat", std::string("\0\1\2binary", 9));  // auto skips it, in its place in the order
  inputs.push_back(d / "f5.dat");
  auto tok = make_byte_tokenizer();
  std::vector<PrepareSummary> summaries;
  for (const int threads : {1, 3, 8}) {
    PrepareOptions o;
    o.inputs = inputs;
    o.output_prefix = d / ("out-" + std::to_string(threads));
    o.threads = threads;
    o.make_tokenizer = [] { return make_byte_tokenizer(); };
    int64_t last_files = 0;
    o.progress = [&](const PrepareProgress& p) {
      CHECK(p.files_total == 6);
      CHECK(p.files_done >= last_files);
      last_files = p.files_done;
    };
    summaries.push_back(prepare_dataset(o, *tok));
    CHECK(last_files == 6);
  }
  for (size_t k = 1; k < summaries.size(); ++k) {
    CAPTURE(k);
    CHECK(read_text(d / "out-1.bin") == read_text(summaries[k].bin_path));
    CHECK(read_text(d / "out-1.idx") == read_text(summaries[k].idx_path));
    CHECK(summaries[k].documents == summaries[0].documents);
    CHECK(summaries[k].tokens == summaries[0].tokens);
    CHECK(summaries[k].skipped_not_text == summaries[0].skipped_not_text);
  }
  CHECK(summaries[0].skipped_not_text.size() == 1);

  // A damaged file among them: its error, nothing written.
  std::string zs = read_text(d / "f3.jsonl.zst");
  write_text(d / "f3.jsonl.zst", zs.substr(0, zs.size() / 2));
  PrepareOptions o;
  o.inputs = inputs;
  o.output_prefix = d / "out-bad/corpus";
  o.threads = 3;
  o.make_tokenizer = [] { return make_byte_tokenizer(); };
  const std::string error = prepare_error(o);
  CHECK(error.find(std::string(d / "f3.jsonl.zst") + ": zstd: ") != std::string::npos);
  CHECK(!std::filesystem::exists(d / "out-bad/corpus.bin"));
  CHECK(!std::filesystem::exists(d / "out-bad/corpus.idx"));
  CHECK(count_temporaries(d / "out-bad") == 0);
}

TEST_CASE("one large JSON-lines file is read in pieces on every thread: the same dataset, errors name the line") {
  ScratchDir d;
  // Blank lines (skipped), empty documents (skipped and counted) and documents.
  std::string text;
  int64_t documents = 0, empty = 0;
  for (int i = 0; i < 3000; ++i) {
    if (i % 97 == 0) {
      text += "\n";
    } else if (i % 89 == 0) {
      text += "{\"text\": \"  \"}\n";
      ++empty;
    } else {
      text += "{\"text\": \"document " + std::to_string(i) + " " + std::string(size_t(i % 61), 'x') + "\"}\n";
      ++documents;
    }
  }
  write_text(d / "big.jsonl", text);
  write_text(d / "small.jsonl", "{\"text\": \"after the big one\"}\n");
  // Pieces of 4 KiB cut at line ends, in order, covering the file.
  const auto pieces = jsonl_pieces(d / "big.jsonl", InputFormat::Auto, 4096);
  REQUIRE(pieces.size() > 10);
  CHECK(pieces.front().begin == 0);
  CHECK(pieces.back().end == text.size());
  for (size_t k = 1; k < pieces.size(); ++k) {
    CHECK(pieces[k].begin == pieces[k - 1].end);
    CHECK(text[pieces[k].begin - 1] == '\n');
    CHECK(pieces[k].first_line ==
          1 + std::count(text.begin(), text.begin() + long(pieces[k].begin), '\n'));
  }
  CHECK(jsonl_pieces(d / "small.jsonl", InputFormat::Auto, 4096).empty());  // under two pieces
  CHECK(jsonl_pieces(d / "big.jsonl", InputFormat::Text, 4096).empty());    // not read as JSON lines
  auto tok = make_byte_tokenizer();
  std::vector<PrepareSummary> runs;
  for (const int threads : {1, 2, 5}) {
    PrepareOptions o;
    o.inputs = {d / "big.jsonl", d / "small.jsonl"};
    o.output_prefix = d / ("pieces-" + std::to_string(threads));
    o.threads = threads;
    o.piece_bytes = 4096;
    o.make_tokenizer = [] { return make_byte_tokenizer(); };
    int64_t files_done = 0;
    o.progress = [&](const PrepareProgress& p) { files_done = p.files_done; };
    runs.push_back(prepare_dataset(o, *tok));
    CHECK(files_done == 2);  // a file counts once, when its last piece is written
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    CHECK(read_text(runs[0].bin_path) == read_text(runs[k].bin_path));
    CHECK(read_text(runs[0].idx_path) == read_text(runs[k].idx_path));
    CHECK(runs[k].documents == runs[0].documents);
    CHECK(runs[k].skipped_empty == runs[0].skipped_empty);
  }
  CHECK(runs[0].documents == documents + 1);
  CHECK(runs[0].skipped_empty == empty);
  // A bad line deep in the file: its line number in the whole file, from any piece.
  std::string bad = text;
  const size_t at = bad.find("document 2500 ");
  bad.replace(at, 8, "docu\"ent");
  write_text(d / "big.jsonl", bad);
  PrepareOptions o;
  o.inputs = {d / "big.jsonl"};
  o.output_prefix = d / "pieces-bad/c";
  o.threads = 2;
  o.piece_bytes = 4096;
  o.make_tokenizer = [] { return make_byte_tokenizer(); };
  const std::string error = prepare_error(o);
  CHECK(error.find(d / "big.jsonl" + ":2501: invalid JSON") != std::string::npos);
  CHECK(!std::filesystem::exists(d / "pieces-bad/c.bin"));
}

TEST_CASE("a quoted pattern stands for its matches, sorted; one that matches nothing is refused") {
  ScratchDir d;
  for (const char* name : {"b.jsonl", "a.jsonl", "c.txt"}) write_text(d / name, "{\"text\": \"x\"}\n");
  CHECK(expand_inputs({d / "*.jsonl"}, InputFormat::Auto) == std::vector<std::string>{d / "a.jsonl", d / "b.jsonl"});
  CHECK(expand_inputs({d / "[ac].*"}, InputFormat::Auto) == std::vector<std::string>{d / "a.jsonl", d / "c.txt"});
  try {
    expand_inputs({d / "*.parquet"}, InputFormat::Auto);
    FAIL("no error");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()) == d / "*.parquet" + ": the pattern matches no file");
  }
}
