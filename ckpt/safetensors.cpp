#include "ckpt/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "ckpt/durable_io.h"
#include "ckpt/error.h"

namespace troupe::ckpt {

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the tensors in data order in the header.
  nlohmann::ordered_json header;
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw CheckpointError(path + ": tensor name '" + t.name + "' is empty, reserved or repeated");
    if (int64_t(t.data.size()) != shape_elements(t.shape))
      throw CheckpointError(path + ": tensor " + t.name + " has " + std::to_string(t.data.size()) +
                            " values for shape " + shape_string(t.shape));
    const uint64_t bytes = t.data.size_bytes();
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();

  const std::string temp = path + ".tmp";
  {
    OutputFile out(temp);
    out.write(&n, sizeof n);
    out.write(json.data(), json.size());
    for (const auto& t : tensors) out.write(t.data.data(), t.data.size_bytes());
    out.sync();
    out.close();
  }
  rename_path(temp, path);
  fsync_dir(parent_dir(path));
}

std::vector<OwnedTensor> read_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 8) throw CheckpointError(path + ": too short for a safetensors file");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    throw CheckpointError(path + ": header length " + std::to_string(n) + " exceeds the file");
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": header is not JSON: " + e.what());
  }
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  std::vector<OwnedTensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor " + name;
    try {
      if (entry.at("dtype").get<std::string>() != "F32")
        throw CheckpointError(where + ": dtype " + entry.at("dtype").dump() + " (only F32 read)");
      OwnedTensor t{name, entry.at("shape").get<Shape>(), {}};
      const auto off = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size ||
          off[1] - off[0] != uint64_t(shape_elements(t.shape)) * sizeof(float))
        throw CheckpointError(where + ": data_offsets " + entry.at("data_offsets").dump() +
                              " do not fit shape " + shape_string(t.shape) + " and " +
                              std::to_string(data_size) + " data bytes");
      t.data.resize(size_t(shape_elements(t.shape)));
      std::memcpy(t.data.data(), data + off[0], off[1] - off[0]);
      spans.emplace_back(off[0], off[1]);
      out.push_back(std::move(t));
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(where + ": bad header entry: " + e.what());
    }
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    if (b != at) throw CheckpointError(path + ": tensor data has gaps or overlaps at byte " +
                                       std::to_string(at));
    at = e;
  }
  if (at != data_size)
    throw CheckpointError(path + ": " + std::to_string(data_size - at) +
                          " data bytes belong to no tensor");
  return out;
}

}  // namespace troupe::ckpt
