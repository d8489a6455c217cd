#include "data/indexed_dataset.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "data/error.h"
#include "data/mapped_file.h"
#include "util/crc32c.h"

namespace troupe::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void convert(const uint8_t* src, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * int64_t(sizeof(T)), sizeof(T));
    if constexpr (sizeof(T) > 4) {
      out[i] = v > T(std::numeric_limits<int32_t>::max()) ? std::numeric_limits<int32_t>::max()
               : v < T(std::numeric_limits<int32_t>::min()) ? std::numeric_limits<int32_t>::min()
                                                            : int32_t(v);
    } else {
      out[i] = int32_t(v);
    }
  }
}

std::string crc_line(const util::MappedFile& f) {
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", util::crc32c(f.data(), f.size()));
  return f.path() + " bytes=" + std::to_string(f.size()) + " crc32c=" + crc;
}

}  // namespace

size_t dtype_size(TokenDType t) {
  switch (t) {
    case TokenDType::UInt8:
    case TokenDType::Int8: return 1;
    case TokenDType::Int16:
    case TokenDType::UInt16: return 2;
    case TokenDType::Int32:
    case TokenDType::Float32: return 4;
    case TokenDType::Int64:
    case TokenDType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(TokenDType t) {
  switch (t) {
    case TokenDType::UInt8: return "uint8";
    case TokenDType::Int8: return "int8";
    case TokenDType::Int16: return "int16";
    case TokenDType::Int32: return "int32";
    case TokenDType::Int64: return "int64";
    case TokenDType::Float64: return "float64";
    case TokenDType::Float32: return "float32";
    case TokenDType::UInt16: return "uint16";
  }
  return "?";
}

TokenDType dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::UInt16 : TokenDType::Int32;
}

struct IndexedDataset::Files {
  util::MappedFile idx;
  util::MappedFile bin;
};

namespace {

// PREFIX + ext, mapped. A missing half is named as such (with a hint when the prefix
// is a directory: the usual slip of naming the folder that holds the dataset); one
// that is not a regular file is refused by map_input_file without being read.
util::MappedFile open_half(const std::string& prefix, const std::string& ext, const std::string& half) {
  const std::string path = prefix + ext;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
    std::string msg = path + ": missing (the " + half + " half of indexed dataset " + prefix + ")";
    if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      msg += "; " + prefix + " is a directory, but a dataset prefix is the path of the dataset's files " +
             "without .idx/.bin (DIR/NAME for DIR/NAME.idx and DIR/NAME.bin)";
    }
    throw DataError(msg);
  }
  return map_input_file(path, "the " + half + " half of indexed dataset " + prefix);
}

// Where the arrays of a validated header lie, and what they must fit.
struct SequenceArrays {
  std::string idx_path, bin_path;
  TokenDType dtype;
  int64_t sequences;
  const uint8_t* lengths;
  const uint8_t* pointers;
  int64_t bin_size;
};

std::string dtype_code_text(TokenDType t) {
  return "dtype code " + std::to_string(int(t)) + " (" + dtype_name(t) + ", at offset 17)";
}

// Sequence i starts where sequence i - 1 ends (at byte 0 for the first) and lies
// inside .bin: Megatron's _IndexWriter writes pointer[i] = the sum of length[j] x
// element size over j < i (merged datasets too: their index is written afresh). A
// dtype code other than the one the .bin was written with breaks that chain at the
// second sequence, or the size check of check_sequences when there is only one.
void check_sequence(const SequenceArrays& a, int64_t i, int64_t& expected_ptr) {
  const int64_t item = int64_t(dtype_size(a.dtype));
  const int32_t len = load<int32_t>(a.lengths + 4 * i);
  const int64_t ptr = load<int64_t>(a.pointers + 8 * i);
  const int64_t len_offset = int64_t(kIdxHeaderBytes) + 4 * i;
  const int64_t ptr_offset = int64_t(kIdxHeaderBytes) + 4 * a.sequences + 8 * i;
  if (len < 0) {
    throw DataError(a.idx_path + ": sequence " + std::to_string(i) + " has negative length " +
                    std::to_string(len) + " at offset " + std::to_string(len_offset));
  }
  if (ptr != expected_ptr && i == 0) {
    throw DataError(a.idx_path + ": sequence 0 starts at byte " + std::to_string(ptr) + " (pointer at offset " +
                    std::to_string(ptr_offset) + "), not at byte 0 of " + a.bin_path +
                    ": pointers are not contiguous from the start, as Megatron writes them");
  }
  if (ptr != expected_ptr) {
    throw DataError(a.idx_path + ": sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                    " (pointer at offset " + std::to_string(ptr_offset) + "), but sequence " +
                    std::to_string(i - 1) + " ends at byte " + std::to_string(expected_ptr) +
                    " (pointer + length x " + std::to_string(item) + " bytes): pointers are not contiguous, " +
                    "as Megatron writes them; is the " + dtype_code_text(a.dtype) + " the one " + a.bin_path +
                    " was written with?");
  }
  // Contiguous, so ptr is aligned and at most bin_size: only the length can overrun.
  if (int64_t(len) * item > a.bin_size - ptr) {
    throw DataError(a.idx_path + ": sequence " + std::to_string(i) + " pointer " + std::to_string(ptr) +
                    " at offset " + std::to_string(ptr_offset) + " with length " + std::to_string(len) +
                    " (offset " + std::to_string(len_offset) + ") points past the end of " + a.bin_path +
                    " (" + std::to_string(a.bin_size) + " bytes)");
  }
  expected_ptr = ptr + int64_t(len) * item;
}

// Every sequence (check_sequence), then .bin holds exactly the tokens the index lists.
// Returns the token count.
int64_t check_sequences(const SequenceArrays& a) {
  int64_t end = 0;
  for (int64_t i = 0; i < a.sequences; ++i) check_sequence(a, i, end);
  const int64_t item = int64_t(dtype_size(a.dtype));
  const int64_t tokens = end / item;  // contiguous from 0: the end is tokens x item
  if (end != a.bin_size) {
    throw DataError(a.bin_path + " is " + std::to_string(a.bin_size) + " bytes, but the " + std::to_string(tokens) +
                    " tokens " + a.idx_path + " lists need " + std::to_string(tokens) + " x " +
                    std::to_string(item) + " = " + std::to_string(end) + " bytes at its " +
                    dtype_code_text(a.dtype) + "; is that the dtype the .bin was written with?");
  }
  return tokens;
}

}  // namespace

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  auto files = std::make_shared<Files>();
  files->idx = open_half(prefix, ".idx", "index");
  files->bin = open_half(prefix, ".bin", "token");
  const uint8_t* p = files->idx.data();
  const size_t size = files->idx.size();
  if (size < kIdxHeaderBytes) {
    throw DataError(idx_path + ": truncated at offset " + std::to_string(size) +
                    ": the header needs " + std::to_string(kIdxHeaderBytes) + " bytes");
  }
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    throw DataError(idx_path + ": bad magic at offset 0: expected \"MMIDIDX\\0\\0\" (not a Megatron indexed dataset index)");
  }
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1) {
    throw DataError(idx_path + ": unsupported version " + std::to_string(version) +
                    " at offset 9 (only version 1 exists)");
  }
  const uint8_t code = p[17];
  if (code < 1 || code > 8) {
    throw DataError(idx_path + ": unknown dtype code " + std::to_string(code) + " at offset 17");
  }
  const auto dtype = TokenDType(code);
  if (dtype == TokenDType::Float32 || dtype == TokenDType::Float64) {
    throw DataError(idx_path + ": dtype " + dtype_name(dtype) +
                    " at offset 17 cannot hold token IDs");
  }
  const uint64_t seqs = load<uint64_t>(p + 18);
  const uint64_t docs = load<uint64_t>(p + 26);
  // Each sequence costs 12 index bytes and each document entry 8: counts past the
  // file size are corrupt (and would overflow the size arithmetic below).
  if (seqs > size / 12 || docs > size / 8) {
    throw DataError(idx_path + ": truncated or corrupt: sequence count " + std::to_string(seqs) +
                    " (offset 18) and document count " + std::to_string(docs) +
                    " (offset 26) need more than the file's " + std::to_string(size) + " bytes");
  }
  const size_t expected = kIdxHeaderBytes + 12 * seqs + 8 * docs;
  if (size < expected) {
    throw DataError(idx_path + ": truncated at offset " + std::to_string(size) + ": " +
                    std::to_string(seqs) + " sequences and " + std::to_string(docs) +
                    " document entries need " + std::to_string(expected) + " bytes");
  }
  if (size != expected && size != expected + seqs) {
    throw DataError(idx_path + ": " + std::to_string(size - expected) +
                    " unexpected bytes after offset " + std::to_string(expected) +
                    " (the index ends there, or one byte per sequence later for multimodal modes)");
  }

  IndexedDataset d;
  d.prefix_ = prefix;
  d.dtype_ = dtype;
  d.sequences_ = int64_t(seqs);
  d.doc_entries_ = int64_t(docs);
  d.lengths_ = p + kIdxHeaderBytes;
  d.pointers_ = d.lengths_ + 4 * seqs;
  d.doc_index_ = d.pointers_ + 8 * seqs;
  d.bin_ = files->bin.data();

  d.total_tokens_ = check_sequences(
      {idx_path, bin_path, dtype, d.sequences_, d.lengths_, d.pointers_, int64_t(files->bin.size())});
  if (docs < 1) {
    throw DataError(idx_path + ": document count 0 at offset 26: the document index must start with 0");
  }
  int64_t prev = -1;
  for (int64_t i = 0; i < d.doc_entries_; ++i) {
    const int64_t v = load<int64_t>(d.doc_index_ + 8 * i);
    const int64_t off = int64_t(kIdxHeaderBytes) + 12 * d.sequences_ + 8 * i;
    const bool bad = (i == 0 && v != 0) || v < prev || v > d.sequences_ ||
                     (i == d.doc_entries_ - 1 && v != d.sequences_);
    if (bad) {
      throw DataError(idx_path + ": document index " + std::to_string(i) + " = " +
                      std::to_string(v) + " at offset " + std::to_string(off) +
                      " is invalid (entries must rise from 0 to the sequence count " +
                      std::to_string(d.sequences_) + ")");
    }
    prev = v;
  }
  d.files_ = std::move(files);
  return d;
}

int32_t IndexedDataset::sequence_length(int64_t i) const { return load<int32_t>(lengths_ + 4 * i); }
int64_t IndexedDataset::sequence_pointer(int64_t i) const { return load<int64_t>(pointers_ + 8 * i); }
int64_t IndexedDataset::document_index(int64_t i) const { return load<int64_t>(doc_index_ + 8 * i); }

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  const uint8_t* src = bin_ + sequence_pointer(seq) + offset * int64_t(dtype_size(dtype_));
  switch (dtype_) {
    case TokenDType::UInt16: convert<uint16_t>(src, count, out); break;
    case TokenDType::Int32: convert<int32_t>(src, count, out); break;
    case TokenDType::UInt8: convert<uint8_t>(src, count, out); break;
    case TokenDType::Int8: convert<int8_t>(src, count, out); break;
    case TokenDType::Int16: convert<int16_t>(src, count, out); break;
    case TokenDType::Int64: convert<int64_t>(src, count, out); break;
    case TokenDType::Float32:
    case TokenDType::Float64: break;  // rejected by open()
  }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t seq) const {
  std::vector<int32_t> v(size_t(sequence_length(seq)));
  read(seq, 0, int64_t(v.size()), v.data());
  return v;
}

std::string IndexedDataset::content_fingerprint() const {
  return crc_line(files_->idx) + "\n" + crc_line(files_->bin);
}

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype,
                                           int64_t vocab_size)
    : prefix_(prefix), dtype_(dtype), vocab_size_(vocab_size) {
  if (dtype != TokenDType::UInt16 && dtype != TokenDType::Int32) {
    throw DataError(prefix + ": the writer stores tokens as uint16 or int32, not " +
                    std::string(dtype_name(dtype)));
  }
  if (dtype == TokenDType::UInt16 && vocab_size > 65536) {
    throw DataError(prefix + ": vocabulary of " + std::to_string(vocab_size) +
                    " does not fit uint16 tokens");
  }
  bin_ = std::make_unique<AtomicFile>(prefix + ".bin");
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::add_sequence(std::span<const int32_t> tokens) {
  if (finished_) throw DataError(prefix_ + ": add_sequence after finish");
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max())) {
    throw DataError(prefix_ + ": sequence " + std::to_string(lengths_.size()) + " has " +
                    std::to_string(tokens.size()) + " tokens, more than an int32 length holds");
  }
  const size_t item = dtype_size(dtype_);
  scratch_.resize(tokens.size() * item);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || t >= vocab_size_) {
      throw DataError(prefix_ + ".bin: token " + std::to_string(t) + " at position " +
                      std::to_string(i) + " of sequence " + std::to_string(lengths_.size()) +
                      " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    }
    if (dtype_ == TokenDType::UInt16) {
      const uint16_t v = uint16_t(t);
      std::memcpy(scratch_.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(scratch_.data() + 4 * i, &t, 4);
    }
  }
  bin_->write(scratch_.data(), scratch_.size());
  lengths_.push_back(int32_t(tokens.size()));
  tokens_ += int64_t(tokens.size());
}

void IndexedDatasetWriter::end_document() { doc_index_.push_back(int64_t(lengths_.size())); }

void IndexedDatasetWriter::finish() {
  if (finished_) return;
  if (doc_index_.back() != int64_t(lengths_.size())) end_document();
  AtomicFile idx(prefix_ + ".idx");
  idx.write(kMagic, sizeof kMagic);
  const uint64_t version = 1, seqs = lengths_.size(), docs = doc_index_.size();
  const uint8_t code = uint8_t(dtype_);
  idx.write(&version, 8);
  idx.write(&code, 1);
  idx.write(&seqs, 8);
  idx.write(&docs, 8);
  idx.write(lengths_.data(), 4 * lengths_.size());
  std::vector<int64_t> pointers(lengths_.size());
  int64_t ptr = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    pointers[i] = ptr;
    ptr += int64_t(lengths_[i]) * int64_t(dtype_size(dtype_));
  }
  idx.write(pointers.data(), 8 * pointers.size());
  idx.write(doc_index_.data(), 8 * doc_index_.size());
  // .bin first: an .idx under the final name always describes a complete .bin.
  bin_->commit();
  idx.commit();
  finished_ = true;
}

}  // namespace troupe::data
