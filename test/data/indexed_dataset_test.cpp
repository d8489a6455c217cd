// Megatron indexed dataset: writer -> reader round trip, a pair written
// independently by tools/data_make_megatron_fixture.py, and every bad-input error.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include "data/error.h"
#include "data/indexed_dataset.h"
#include "test/data/helpers.h"

using namespace troupe::data;
using namespace troupe::data::testing;

namespace {

const std::string kFixtures = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/";

std::string error_of(const std::string& prefix) {
  try {
    IndexedDataset::open(prefix);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Copies the u16 fixture to dir/name and returns the prefix.
std::string copy_fixture(const ScratchDir& dir, const std::string& name) {
  for (const char* ext : {".bin", ".idx"}) {
    std::filesystem::copy_file(kFixtures + "megatron_u16" + ext, dir / (name + ext));
  }
  return dir / name;
}

void patch(const std::string& path, size_t offset, const void* bytes, size_t n) {
  std::string s = read_text(path);
  std::memcpy(s.data() + offset, bytes, n);
  write_text(path, s);
}

}  // namespace

TEST_CASE("writer and reader round trip, uint16 and int32") {
  ScratchDir dir;
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3, 256}, {}, {255, 0, 256}, {7, 256}};
  write_dataset(dir / "small", docs, 257);
  const IndexedDataset d = IndexedDataset::open(dir / "small");
  CHECK(d.dtype() == TokenDType::UInt16);
  CHECK(d.sequences() == 4);
  CHECK(d.documents() == 4);
  CHECK(d.total_tokens() == 9);
  for (int i = 0; i < 4; ++i) CHECK(d.sequence(i) == docs[size_t(i)]);
  CHECK(d.sequence_pointer(2) == 2 * 4);  // bytes: 4 uint16 tokens, then an empty sequence
  CHECK(std::filesystem::file_size(dir / "small.bin") == 9 * 2);
  CHECK(std::filesystem::file_size(dir / "small.idx") == kIdxHeaderBytes + 12 * 4 + 8 * 5);
  CHECK(count_temporaries(dir.path()) == 0);

  const std::vector<std::vector<int32_t>> big = {{70000, 50256, 1}, {100000}};
  write_dataset(dir / "big", big, 100001);
  const IndexedDataset b = IndexedDataset::open(dir / "big");
  CHECK(b.dtype() == TokenDType::Int32);
  CHECK(b.sequence(0) == big[0]);
  CHECK(b.sequence(1) == big[1]);
  int32_t part[2];
  b.read(0, 1, 2, part);
  CHECK(part[0] == 50256);
  CHECK(part[1] == 1);
}

TEST_CASE("dtype follows Megatron's rule: uint16 below 65500 entries") {
  CHECK(dtype_for_vocab(257) == TokenDType::UInt16);
  CHECK(dtype_for_vocab(50257) == TokenDType::UInt16);
  CHECK(dtype_for_vocab(65499) == TokenDType::UInt16);
  CHECK(dtype_for_vocab(65500) == TokenDType::Int32);
}

TEST_CASE("multi-sequence documents round trip") {
  ScratchDir dir;
  IndexedDatasetWriter w(dir / "m", TokenDType::UInt16, 300);
  w.add_sequence(std::vector<int32_t>{1, 2});
  w.add_sequence(std::vector<int32_t>{3});
  w.end_document();
  w.add_document(std::vector<int32_t>{4, 5, 6});
  w.finish();
  const IndexedDataset d = IndexedDataset::open(dir / "m");
  CHECK(d.sequences() == 3);
  CHECK(d.documents() == 2);
  CHECK(d.document_index(0) == 0);
  CHECK(d.document_index(1) == 2);
  CHECK(d.document_index(2) == 3);
}

TEST_CASE("reads a pair written independently after Megatron's layout") {
  const IndexedDataset u = IndexedDataset::open(kFixtures + "megatron_u16");
  CHECK(u.dtype() == TokenDType::UInt16);
  CHECK(u.sequences() == 4);
  CHECK(u.documents() == 3);
  CHECK(u.sequence(0) == std::vector<int32_t>{1, 2, 3, 256});
  CHECK(u.sequence(1) == std::vector<int32_t>{10, 11});
  CHECK(u.sequence(2) == std::vector<int32_t>{12, 13, 14, 256});
  CHECK(u.sequence(3) == std::vector<int32_t>{42, 256});
  CHECK(u.document_index(1) == 1);
  CHECK(u.document_index(2) == 3);
  CHECK(u.document_index(3) == 4);

  const IndexedDataset i = IndexedDataset::open(kFixtures + "megatron_i32");
  CHECK(i.dtype() == TokenDType::Int32);
  CHECK(i.sequence(0) == std::vector<int32_t>{70000, 50256});
  CHECK(i.sequence(1) == std::vector<int32_t>{1, 2, 3, 65535, 100000});
}

TEST_CASE("our writer produces the same bytes as the independent script") {
  ScratchDir dir;
  IndexedDatasetWriter w(dir / "same", TokenDType::UInt16, 257);
  w.add_document(std::vector<int32_t>{1, 2, 3, 256});
  w.add_sequence(std::vector<int32_t>{10, 11});
  w.add_sequence(std::vector<int32_t>{12, 13, 14, 256});
  w.end_document();
  w.add_document(std::vector<int32_t>{42, 256});
  w.finish();
  CHECK(read_text(dir / "same.idx") == read_text(kFixtures + "megatron_u16.idx"));
  CHECK(read_text(dir / "same.bin") == read_text(kFixtures + "megatron_u16.bin"));
}

TEST_CASE("missing files name the missing half") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "x");
  std::filesystem::remove(p + ".bin");
  CHECK(contains(error_of(p), p + ".bin: missing"));
  std::filesystem::remove(p + ".idx");
  CHECK(contains(error_of(p), p + ".idx: missing"));
}

TEST_CASE("bad magic, version and dtype") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "x");
  patch(p + ".idx", 0, "MMIDIDY", 7);
  CHECK(contains(error_of(p), "x.idx: bad magic at offset 0"));

  const std::string q = copy_fixture(dir, "v");
  const uint64_t v2 = 2;
  patch(q + ".idx", 9, &v2, 8);
  CHECK(contains(error_of(q), "v.idx: unsupported version 2 at offset 9"));

  const std::string r = copy_fixture(dir, "d");
  const uint8_t f32 = 7, junk = 42;
  patch(r + ".idx", 17, &f32, 1);
  CHECK(contains(error_of(r), "d.idx: dtype float32 at offset 17"));
  patch(r + ".idx", 17, &junk, 1);
  CHECK(contains(error_of(r), "d.idx: unknown dtype code 42 at offset 17"));
}

TEST_CASE("truncated index files") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "t");
  const std::string full = read_text(p + ".idx");
  write_text(p + ".idx", full.substr(0, 20));
  CHECK(contains(error_of(p), "t.idx: truncated at offset 20: the header needs 34 bytes"));
  write_text(p + ".idx", full.substr(0, full.size() - 3));
  CHECK(contains(error_of(p), "t.idx: truncated at offset 111"));
  write_text(p + ".idx", full + "xyz");
  CHECK(contains(error_of(p), "unexpected bytes after offset 114"));
}

TEST_CASE("truncated .bin and pointers past the end") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "b");
  const std::string bin = read_text(p + ".bin");
  write_text(p + ".bin", bin.substr(0, bin.size() - 2));
  // The last sequence (index 3) starts at byte 20 and needs 4 bytes; 22 remain.
  CHECK(contains(error_of(p), "b.idx: sequence 3 pointer 20 at offset 74 with length 2 (offset 46) points past the end of " +
                                  p + ".bin (22 bytes)"));

  const std::string q = copy_fixture(dir, "ptr");
  const int64_t far = 1000;
  patch(q + ".idx", kIdxHeaderBytes + 4 * 4 + 8 * 1, &far, 8);  // sequence 1's pointer
  CHECK(contains(error_of(q), "ptr.idx: sequence 1 pointer 1000 at offset 58"));
}

TEST_CASE("document indices must rise from 0 to the sequence count") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "di");
  const int64_t bad = 9;
  const size_t off = kIdxHeaderBytes + 12 * 4 + 8 * 2;
  patch(p + ".idx", off, &bad, 8);
  CHECK(contains(error_of(p), "di.idx: document index 2 = 9 at offset " + std::to_string(off)));
}

TEST_CASE("the writer rejects tokens outside the vocabulary and leaves nothing behind") {
  ScratchDir dir;
  {
    IndexedDatasetWriter w(dir / "bad", TokenDType::UInt16, 257);
    w.add_document(std::vector<int32_t>{1, 2});
    try {
      w.add_document(std::vector<int32_t>{3, 257});
      FAIL("expected an error");
    } catch (const DataError& e) {
      CHECK(contains(e.what(), "token 257 at position 1 of sequence 1 is outside the vocabulary [0, 257)"));
    }
  }
  CHECK_FALSE(std::filesystem::exists(dir / "bad.bin"));
  CHECK_FALSE(std::filesystem::exists(dir / "bad.idx"));
  CHECK(count_temporaries(dir.path()) == 0);
}
