// Reading and writing safetensors files (Hugging Face's tensor format), for model
// inspection: parameters under GPT-2 names, gradients, Adam moments and the integer
// batch tensors of `supervisor inspect-update`, and the PyTorch fixtures of the tests.
//
// Layout: u64 little-endian N; N bytes of JSON header
//   {"__metadata__": {"k": "v"}, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8; then the raw little-endian tensor bytes,
// offsets counted from the end of the header. dtypes here: F32, I32, I64.
// (ckpt/ keeps its own F32-only writer for checkpoint export.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::model {

enum class StDtype { kF32, kI32, kI64 };

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major

  static StTensor f32(std::string name, std::vector<int64_t> shape, const float* data);
  static StTensor i32(std::string name, std::vector<int64_t> shape, const int32_t* data);
  static StTensor i64(std::string name, std::vector<int64_t> shape, const int64_t* data);
  int64_t numel() const;
  // Typed copies; throw std::runtime_error naming the tensor on a dtype mismatch.
  std::vector<float> as_f32() const;
  std::vector<int32_t> as_i32() const;
};

struct StFile {
  std::map<std::string, std::string> metadata;
  std::vector<StTensor> tensors;  // in file order
  // The tensor called `name`; throws std::runtime_error naming it and `path`.
  const StTensor& at(const std::string& name) const;
  const StTensor* find(const std::string& name) const;
  std::string path;
};

// Writes atomically: PATH.tmp, fsync, rename over PATH, fsync of the directory.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and checks a whole file; errors name the file and the offending tensor or offset.
StFile read_safetensors(const std::string& path);

}  // namespace troupe::model
