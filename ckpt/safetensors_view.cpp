#include "ckpt/safetensors_view.h"

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/error.h"

namespace troupe::ckpt {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw CheckpointError(path + ": " + what); }

}  // namespace

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {  // inf or NaN (the payload kept)
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal half = mantissa * 2^-24: normalize
    exponent = 113;  // 127 - 15 + 1
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsView SafetensorsView::open(const std::string& path) {
  SafetensorsView v;
  v.file_ = util::rethrow_file_error_as<CheckpointError>([&] { return util::MappedFile::open(path, "safetensors file"); });
  const uint64_t size = v.file_.size();
  if (size < 8) fail(path, fmt::format("file of {} bytes is too short for a safetensors header", size));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(v.file_.data()[i]) << (8 * i);
  if (n > size - 8) fail(path, fmt::format("header length {} runs past the end of the file ({} bytes)", n, size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(v.file_.chars() + 8, v.file_.chars() + 8 + n);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    SafetensorsEntry e;
    e.name = it.key();
    try {
      e.dtype = it->at("dtype").get<std::string>();
      e.shape = it->at("shape").get<std::vector<int64_t>>();
      const auto off = it->at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        fail(path, fmt::format("tensor {}: data_offsets outside the {} data bytes", e.name, data_size));
      int64_t elements = 1;
      for (const int64_t d : e.shape) {
        if (d < 0) fail(path, fmt::format("tensor {}: negative dimension {}", e.name, d));
        elements *= d;
      }
      const int width = dtype_size(e.dtype);
      if (width > 0 && off[1] - off[0] != uint64_t(elements) * uint64_t(width))
        fail(path, fmt::format("tensor {}: {} bytes do not match its shape and dtype {}", e.name, off[1] - off[0],
                               e.dtype));
      e.begin = data_start + off[0];
      e.end = data_start + off[1];
    } catch (const nlohmann::json::exception& ex) {
      fail(path, fmt::format("tensor {}: malformed header entry ({})", e.name, ex.what()));
    }
    v.by_name_[e.name] = v.entries_.size();
    v.entries_.push_back(std::move(e));
  }
  return v;
}

const SafetensorsEntry* SafetensorsView::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsView::read_f32(const SafetensorsEntry& e, int64_t first, int64_t count, float* out) const {
  const uint8_t* p = bytes(e);
  if (e.dtype == "F32") {
    std::memcpy(out, p + first * 4, size_t(count) * 4);
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    const bool bf16 = e.dtype == "BF16";
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, p + (first + i) * 2, 2);
      out[i] = bf16 ? bf16_to_float(h) : half_to_float(h);
    }
  } else {
    fail(path(), fmt::format("tensor {}: dtype {} is not supported (F32, BF16 and F16 are read as fp32)", e.name,
                             e.dtype));
  }
}

}  // namespace troupe::ckpt
