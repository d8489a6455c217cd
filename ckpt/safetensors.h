// The safetensors file format (Hugging Face), F32 tensors only:
//   u64 little-endian N, then N bytes of JSON header
//     {"__metadata__": {"k": "v", ...},
//      "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
//   (padded with spaces to a multiple of 8), then the tensors' raw little-endian
//   bytes; data_offsets count from the end of the header and tile the data exactly.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "ckpt/region.h"

namespace troupe::ckpt {

struct TensorView {
  std::string name;
  Shape shape;
  std::span<const float> data;  // row-major, shape_elements(shape) values
};

struct OwnedTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;
};

// Writes `path` atomically (PATH.tmp, fsync, rename, fsync directory). Tensors are
// stored in the given order. Throws CheckpointError on duplicate names or a data
// size that does not match the shape.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads every tensor (F32 only) in file order; checks the header, offsets and
// sizes, naming the file and the tensor on error.
std::vector<OwnedTensor> read_safetensors(const std::string& path);

}  // namespace troupe::ckpt
