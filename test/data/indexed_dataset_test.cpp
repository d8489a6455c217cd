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
  CHECK(contains(error_of(q), "ptr.idx: sequence 1 starts at byte 1000 (pointer at offset 58), but sequence 0 ends "
                              "at byte 8"));
}

TEST_CASE("pointers must be contiguous from byte 0, as Megatron writes them") {
  ScratchDir dir;
  // A uint16 file whose dtype code says uint8: sequence 1 starts at byte 6, where
  // 3 one-byte tokens would end at byte 3.
  write_dataset(dir / "u8", {{1, 2, 3}, {4, 5}});
  const uint8_t uint8_code = 1;
  patch(dir / "u8.idx", 17, &uint8_code, 1);
  CHECK(error_of(dir / "u8") ==
        dir / "u8.idx" + ": sequence 1 starts at byte 6 (pointer at offset 50), but sequence 0 ends at byte 3 "
        "(pointer + length x 1 bytes): pointers are not contiguous, as Megatron writes them; is the dtype code 1 "
        "(uint8, at offset 17) the one " + dir / "u8.bin" + " was written with?");

  // The other way round: int32 on a uint16 file; sequence 0 would end at byte 12.
  write_dataset(dir / "i32", {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11}});
  const uint8_t int32_code = 4;
  patch(dir / "i32.idx", 17, &int32_code, 1);
  CHECK(contains(error_of(dir / "i32"), "i32.idx: sequence 1 starts at byte 6 (pointer at offset 50), but sequence "
                                        "0 ends at byte 12 (pointer + length x 4 bytes)"));

  // A gap between sequences 1 and 2 of the fixture (lengths 4, 2, 4, 2 in uint16).
  const std::string g = copy_fixture(dir, "gap");
  const int64_t moved = 14;
  patch(g + ".idx", kIdxHeaderBytes + 4 * 4 + 8 * 2, &moved, 8);
  CHECK(contains(error_of(g), "gap.idx: sequence 2 starts at byte 14 (pointer at offset 66), but sequence 1 ends at "
                              "byte 12 (pointer + length x 2 bytes): pointers are not contiguous"));

  const std::string z = copy_fixture(dir, "zero");
  const int64_t two = 2;
  patch(z + ".idx", kIdxHeaderBytes + 4 * 4, &two, 8);
  CHECK(error_of(z) == z + ".idx: sequence 0 starts at byte 2 (pointer at offset 50), not at byte 0 of " + z +
                           ".bin: pointers are not contiguous from the start, as Megatron writes them");
}

TEST_CASE(".bin must hold exactly the tokens the index lists") {
  ScratchDir dir;
  // One sequence of uint16 tokens read as uint8: the pointers are fine, the size is not.
  write_dataset(dir / "one", {{1, 2, 3}});
  const uint8_t uint8_code = 1;
  patch(dir / "one.idx", 17, &uint8_code, 1);
  CHECK(error_of(dir / "one") == dir / "one.bin" + " is 6 bytes, but the 3 tokens " + dir / "one.idx" +
                                     " lists need 3 x 1 = 3 bytes at its dtype code 1 (uint8, at offset 17); is "
                                     "that the dtype the .bin was written with?");

  const std::string t = copy_fixture(dir, "tail");
  write_text(t + ".bin", read_text(t + ".bin") + "xy");
  CHECK(contains(error_of(t), "tail.bin is 26 bytes, but the 12 tokens " + t +
                                  ".idx lists need 12 x 2 = 24 bytes at its dtype code 8 (uint16, at offset 17)"));

  // What troupe's writer and the independent script write passes (see the round trips above).
  CHECK(IndexedDataset::open(kFixtures + "megatron_u16").total_tokens() == 12);
  CHECK(IndexedDataset::open(kFixtures + "megatron_i32").total_tokens() == 7);
}

TEST_CASE("document indices must rise from 0 to the sequence count") {
  ScratchDir dir;
  const std::string p = copy_fixture(dir, "di");
  const int64_t bad = 9;
  const size_t off = kIdxHeaderBytes + 12 * 4 + 8 * 2;
  patch(p + ".idx", off, &bad, 8);
  CHECK(contains(error_of(p), "di.idx: document index 2 = 9 at offset " + std::to_string(off)));
}

TEST_CASE("a dataset half that is a FIFO, directory or device is refused, without blocking or reading it") {
  ScratchDir dir;
  const std::string f = copy_fixture(dir, "f");
  std::filesystem::remove(f + ".idx");
  make_fifo(f + ".idx");
  CHECK(error_of(f) == f + ".idx: the index half of indexed dataset " + f + " is a FIFO, not a regular file");

  const std::string g = copy_fixture(dir, "g");
  std::filesystem::remove(g + ".bin");
  make_fifo(g + ".bin");
  CHECK(error_of(g) == g + ".bin: the token half of indexed dataset " + g + " is a FIFO, not a regular file");

  const std::string h = copy_fixture(dir, "h");
  std::filesystem::remove(h + ".idx");
  std::filesystem::create_directory(h + ".idx");
  CHECK(error_of(h) == h + ".idx: the index half of indexed dataset " + h + " is a directory, not a regular file");

  const std::string z = copy_fixture(dir, "z");
  std::filesystem::remove(z + ".bin");
  std::filesystem::create_symlink("/dev/zero", z + ".bin");
  CHECK(error_of(z) == z + ".bin: the token half of indexed dataset " + z +
                           " is a character device, not a regular file");
}

TEST_CASE("a prefix naming a directory is refused with a hint") {
  ScratchDir dir;
  std::filesystem::create_directory(dir / "corpus");
  copy_fixture(dir, "corpus/text");
  CHECK(error_of(dir / "corpus") ==
        dir / "corpus.idx" + ": missing (the index half of indexed dataset " + dir / "corpus" + "); " +
            dir / "corpus" + " is a directory, but a dataset prefix is the path of the dataset's files without " +
            ".idx/.bin (DIR/NAME for DIR/NAME.idx and DIR/NAME.bin)");
  CHECK(IndexedDataset::open(dir / "corpus/text").sequences() == 4);
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
