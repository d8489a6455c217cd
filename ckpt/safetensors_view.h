// A safetensors file mapped read-only and indexed by its header, for reading the
// weights of a published model without loading the file: a rank copies out only the
// rows of the tensors it holds (ckpt/hf_import.h). Any dtype is listed; F32, BF16
// and F16 convert to fp32 (published weights are mostly BF16), every other one is
// refused by name when read.
//
// Layout (Hugging Face's): u64 little-endian N, N bytes of JSON header
//   {"__metadata__": {...}, "<name>": {"dtype": "BF16", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the data; offsets count from the end of the header. Errors name the file and
// the tensor. (model/safetensors.h reads and writes whole small files in memory.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/durable_file.h"

namespace troupe::ckpt {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as the header spells it: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the file (header included)
};

class SafetensorsView {
 public:
  // Maps `path` and checks its header: valid JSON, every entry's offsets inside the
  // data and its byte count equal to shape x dtype size. Throws CheckpointError.
  static SafetensorsView open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Entries in header order (the metadata entry excluded).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // The raw bytes of an entry.
  const uint8_t* bytes(const SafetensorsEntry& e) const { return file_.data() + e.begin; }

  // Elements [first, first + count) of `e` (row-major) converted to fp32 into `out`.
  // Throws CheckpointError naming the tensor when its dtype is not F32, BF16 or F16.
  void read_f32(const SafetensorsEntry& e, int64_t first, int64_t count, float* out) const;

 private:
  util::MappedFile file_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
};

// The IEEE binary16 value with bits `h` as a float (exact: every half is a float).
float half_to_float(uint16_t h);
// The bfloat16 value with bits `b` as a float (the high half of the float's bits).
float bf16_to_float(uint16_t b);
// Bytes per element of a safetensors dtype name; 0 for a name it does not know.
int dtype_size(const std::string& dtype);

}  // namespace troupe::ckpt
