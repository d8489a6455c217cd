#include "model/param_registry.h"

#include <cmath>
#include <stdexcept>

#include "config/derived.h"

namespace troupe::model {

const char* decay_group_name(DecayGroup g) { return g == DecayGroup::kDecay ? "decay" : "no_decay"; }

ParameterRegistry::ParameterRegistry(const Config& c, StageRange range) : range_(range) {
  const auto& m = c.model();
  if (range.first_layer < 0 || range.last_layer > m.layers() || range.first_layer > range.last_layer)
    throw std::invalid_argument("stage " + range.str() + " is outside the model's " +
                                std::to_string(m.layers()) + " layers");
  if (!m.tied_embeddings()) throw std::invalid_argument("model.tied_embeddings: only true is implemented");
  const int64_t D = m.width(), F = config::ffn_width(m), Vp = config::padded_vocab(c);
  const float std = m.init_std();
  const float proj_std = std / std::sqrt(2.0f * float(m.layers()));
  const auto W = DecayGroup::kDecay, NW = DecayGroup::kNoDecay;
  const auto N = InitKind::kNormal, Z = InitKind::kZeros, O = InitKind::kOnes;

  if (range.has_embedding()) {
    wte_ = add("wte.weight", {Vp, D}, W, N, std, m.vocab_size());
    wpe_ = add("wpe.weight", {m.max_positions(), D}, W, N, std);
  }
  for (int l = range.first_layer; l < range.last_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    BlockOffsets b;
    b.ln1_w = add(p + "ln_1.weight", {D}, NW, O, 0);
    b.ln1_b = add(p + "ln_1.bias", {D}, NW, Z, 0);
    b.qkv_w = add(p + "attn.c_attn.weight", {D, 3 * D}, W, N, std);
    b.qkv_b = add(p + "attn.c_attn.bias", {3 * D}, NW, Z, 0);
    b.attn_proj_w = add(p + "attn.c_proj.weight", {D, D}, W, N, proj_std);
    b.attn_proj_b = add(p + "attn.c_proj.bias", {D}, NW, Z, 0);
    b.ln2_w = add(p + "ln_2.weight", {D}, NW, O, 0);
    b.ln2_b = add(p + "ln_2.bias", {D}, NW, Z, 0);
    b.fc_w = add(p + "mlp.c_fc.weight", {D, F}, W, N, std);
    b.fc_b = add(p + "mlp.c_fc.bias", {F}, NW, Z, 0);
    b.fc_proj_w = add(p + "mlp.c_proj.weight", {F, D}, W, N, proj_std);
    b.fc_proj_b = add(p + "mlp.c_proj.bias", {D}, NW, Z, 0);
    blocks_.push_back(b);
  }
  if (range.has_head(c)) {
    lnf_w_ = add("ln_f.weight", {D}, NW, O, 0);
    lnf_b_ = add("ln_f.bias", {D}, NW, Z, 0);
    if (!range.has_embedding()) {
      wte_ = add("wte.weight", {Vp, D}, W, N, std, m.vocab_size());
      tensors_.back().counts_in_norm = false;  // the first stage's copy is the one counted
    }
  }
}

int64_t ParameterRegistry::add(std::string name, std::vector<int64_t> shape, DecayGroup g,
                               InitKind init, float std, int64_t valid_rows) {
  ParamTensor t;
  t.name = std::move(name);
  t.global_shape = shape;
  t.slice_start.assign(shape.size(), 0);
  t.shape = shape;
  t.numel = 1;
  for (int64_t d : shape) t.numel *= d;
  t.offset = total_;
  t.group = g;
  t.init = init;
  t.init_std = std;
  t.valid_rows = valid_rows >= 0 ? valid_rows : shape[0];
  total_ += t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

const ParamTensor* ParameterRegistry::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamTensor& ParameterRegistry::at(std::string_view name) const {
  if (const auto* t = find(name)) return *t;
  throw std::out_of_range("no parameter '" + std::string(name) + "' in the stage holding " + range_.str());
}

std::vector<std::string> ParameterRegistry::names(DecayGroup g) const {
  std::vector<std::string> out;
  for (const auto& t : tensors_)
    if (t.group == g) out.push_back(t.name);
  return out;
}

std::vector<DecaySpan> ParameterRegistry::decay_spans() const {
  std::vector<DecaySpan> out;
  for (const auto& t : tensors_) {
    if (!out.empty() && out.back().group == t.group && out.back().end == t.offset)
      out.back().end = t.offset + t.numel;
    else
      out.push_back({t.offset, t.offset + t.numel, t.group});
  }
  return out;
}

std::vector<FlatRange> ParameterRegistry::norm_ranges() const {
  std::vector<FlatRange> out;
  for (const auto& t : tensors_) {
    if (!t.counts_in_norm) continue;
    if (!out.empty() && out.back().end == t.offset)
      out.back().end = t.offset + t.numel;
    else
      out.push_back({t.offset, t.offset + t.numel});
  }
  return out;
}

}  // namespace troupe::model
