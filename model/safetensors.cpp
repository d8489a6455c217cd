#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "util/durable_file.h"

namespace troupe::model {
namespace {

size_t dtype_bytes(StDtype d) { return d == StDtype::kI64 ? 8 : 4; }
const char* dtype_str(StDtype d) { return d == StDtype::kF32 ? "F32" : d == StDtype::kI32 ? "I32" : "I64"; }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

}  // namespace

StTensor StTensor::f32(std::string name, std::vector<int64_t> shape, const float* data) {
  StTensor t{std::move(name), StDtype::kF32, std::move(shape), {}};
  t.bytes.resize(size_t(t.numel()) * 4);
  std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

StTensor StTensor::i32(std::string name, std::vector<int64_t> shape, const int32_t* data) {
  StTensor t{std::move(name), StDtype::kI32, std::move(shape), {}};
  t.bytes.resize(size_t(t.numel()) * 4);
  std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

StTensor StTensor::i64(std::string name, std::vector<int64_t> shape, const int64_t* data) {
  StTensor t{std::move(name), StDtype::kI64, std::move(shape), {}};
  t.bytes.resize(size_t(t.numel()) * 8);
  std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> StTensor::as_f32() const {
  if (dtype != StDtype::kF32) throw std::runtime_error("tensor " + name + " is " + dtype_str(dtype) + ", not F32");
  std::vector<float> out(static_cast<size_t>(numel()));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<int32_t> StTensor::as_i32() const {
  if (dtype != StDtype::kI32) throw std::runtime_error("tensor " + name + " is " + dtype_str(dtype) + ", not I32");
  std::vector<int32_t> out(static_cast<size_t>(numel()));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

const StTensor* StFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const StTensor& StFile::at(const std::string& name) const {
  if (const auto* t = find(name)) return *t;
  fail(path, "no tensor '" + name + "'");
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) fail(path, "duplicate or reserved tensor name '" + t.name + "'");
    if (t.bytes.size() != size_t(t.numel()) * dtype_bytes(t.dtype))
      fail(path, "tensor " + t.name + " holds " + std::to_string(t.bytes.size()) + " bytes, its shape needs " +
                     std::to_string(size_t(t.numel()) * dtype_bytes(t.dtype)));
    header[t.name] = {{"dtype", dtype_str(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));

  try {
    util::AtomicFileWriter out(path);
    out.write(len, 8);
    out.write(h.data(), h.size());
    for (const auto& t : tensors) out.write(t.bytes.data(), t.bytes.size());
    out.commit();
  } catch (const util::FileError& e) {
    throw std::runtime_error(e.what());
  }
}

StFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  in.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(in.tellg());
  in.seekg(0);
  if (size < 8) fail(path, "file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > size - 8) fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
  std::string h(n, '\0');
  in.read(h.data(), std::streamsize(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  StFile file;
  file.path = path;
  struct Entry {
    uint64_t begin, end;
    StTensor t;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m) file.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const auto& v = *it;
    StTensor t;
    t.name = it.key();
    try {
      const std::string d = v.at("dtype").get<std::string>();
      if (d == "F32") t.dtype = StDtype::kF32;
      else if (d == "I32") t.dtype = StDtype::kI32;
      else if (d == "I64") t.dtype = StDtype::kI64;
      else fail(path, "tensor " + t.name + ": dtype " + d + " is not supported (F32, I32, I64)");
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        fail(path, "tensor " + t.name + ": data_offsets outside the " + std::to_string(data_size) + " data bytes");
      if (off[1] - off[0] != uint64_t(t.numel()) * dtype_bytes(t.dtype))
        fail(path, "tensor " + t.name + ": " + std::to_string(off[1] - off[0]) + " bytes do not match its shape");
      entries.push_back({off[0], off[1], std::move(t)});
    } catch (const nlohmann::json::exception& e) {
      fail(path, "tensor " + it.key() + ": malformed header entry (" + e.what() + ")");
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (auto& e : entries) {
    e.t.bytes.resize(size_t(e.end - e.begin));
    in.seekg(std::streamoff(data_start + e.begin));
    in.read(reinterpret_cast<char*>(e.t.bytes.data()), std::streamsize(e.t.bytes.size()));
    if (!in) fail(path, "tensor " + e.t.name + ": read failed at offset " + std::to_string(data_start + e.begin));
    file.tensors.push_back(std::move(e.t));
  }
  return file;
}

}  // namespace troupe::model
