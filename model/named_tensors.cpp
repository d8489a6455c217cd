#include "model/named_tensors.h"

#include <cstring>
#include <set>
#include <stdexcept>

namespace troupe::model {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<StTensor> export_tensors(const ParameterRegistry& reg, const float* host_flat, const std::string& prefix) {
  std::vector<StTensor> out;
  for (const auto& t : reg.tensors()) {
    if (t.shape != t.global_shape)
      throw std::logic_error("export_tensors: " + t.name + " is a slice " + shape_str(t.shape) + " of " +
                             shape_str(t.global_shape) + "; gather whole tensors before exporting");
    std::vector<int64_t> shape = t.shape;
    shape[0] = t.valid_rows;  // wte: drop the vocabulary padding rows
    out.push_back(StTensor::f32(prefix + t.name, shape, host_flat + t.offset));
  }
  return out;
}

void import_tensors(const ParameterRegistry& reg, const StFile& file, float* host_flat, const std::string& prefix_in) {
  std::string prefix = prefix_in;
  if (prefix.empty() && !file.find("wte.weight") && file.find("transformer.wte.weight")) prefix = "transformer.";
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const auto& t : reg.tensors()) {
    const std::string name = prefix + t.name;
    const StTensor* src = file.find(name);
    if (!src) {
      problems.push_back("missing " + name);
      continue;
    }
    used.insert(name);
    if (src->dtype != StDtype::kF32) {
      problems.push_back(name + " is not F32");
      continue;
    }
    // Accept the global shape, or for wte also the unpadded vocab_size rows.
    std::vector<int64_t> unpadded = t.global_shape;
    unpadded[0] = t.valid_rows;
    if (src->shape != t.global_shape && src->shape != unpadded) {
      problems.push_back(name + " has shape " + shape_str(src->shape) + ", expected " + shape_str(unpadded));
      continue;
    }
    const std::vector<float> data = src->as_f32();
    const int64_t src_rows = src->shape[0];
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const int64_t gcols = t.global_shape.size() == 2 ? t.global_shape[1] : 1;
    const int64_t col0 = t.shape.size() == 2 ? t.slice_start[1] : 0;
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      const int64_t gr = t.slice_start[0] + r;
      float* dst = host_flat + t.offset + r * cols;
      if (gr < src_rows && gr < t.valid_rows)
        std::memcpy(dst, data.data() + gr * gcols + col0, size_t(cols) * sizeof(float));
      else
        std::memset(dst, 0, size_t(cols) * sizeof(float));  // vocabulary padding
    }
  }
  for (const auto& src : file.tensors) {
    if (used.count(src.name) || src.name.rfind(prefix, 0) != 0) continue;
    if (ends_with(src.name, ".attn.bias") || ends_with(src.name, ".attn.masked_bias") || src.name == "lm_head.weight")
      continue;
    // A tensor of the model this stage does not hold (another pipeline stage's) is fine.
    const std::string bare = src.name.substr(prefix.size());
    const bool other_stage = bare.rfind("h.", 0) == 0 || bare == "wpe.weight" || bare == "wte.weight" ||
                             bare.rfind("ln_f.", 0) == 0 || bare.rfind("model.layers.", 0) == 0 ||
                             bare == "model.embed_tokens.weight" || bare == "model.norm.weight";
    if (!other_stage) problems.push_back("unknown tensor " + src.name);
  }
  if (!problems.empty()) {
    std::string msg = file.path + ": cannot load the " + reg.range().str() + " weights:";
    constexpr size_t kShown = 6;
    for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += (i ? "; " : " ") + problems[i];
    if (problems.size() > kShown) msg += "; and " + std::to_string(problems.size() - kShown) + " more";
    throw std::runtime_error(msg);
  }
}

}  // namespace troupe::model
