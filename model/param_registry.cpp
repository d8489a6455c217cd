#include "model/param_registry.h"

#include <cmath>
#include <stdexcept>

#include "config/derived.h"
#include "config/model_family.h"

namespace troupe::model {

const char* decay_group_name(DecayGroup g) { return g == DecayGroup::kDecay ? "decay" : "no_decay"; }

ParameterRegistry::ParameterRegistry(const ModelSpec& spec, StageRange range, TensorSlice slice)
    : ParameterRegistry(spec, StageLayers::single(range), slice) {}

ParameterRegistry::ParameterRegistry(const ModelSpec& spec, StageLayers layers, TensorSlice slice)
    : range_(std::move(layers)), slice_(slice) {
  const auto& m = spec.model;
  if (range_.chunks.empty()) throw std::invalid_argument("a stage needs at least one layer range");
  int previous_end = 0;
  for (const auto& range : range_.chunks) {
    if (range.first_layer < previous_end || range.last_layer > m.layers() || range.first_layer > range.last_layer)
      throw std::invalid_argument("stage " + range_.str() + " is outside the model's " +
                                  std::to_string(m.layers()) + " layers or not ascending");
    previous_end = range.last_layer;
  }
  const int T = slice.size, t = slice.rank;
  if (T < 1 || t < 0 || t >= T)
    throw std::invalid_argument("tensor-parallel rank " + std::to_string(t) + " of " + std::to_string(T) +
                                " is not a rank of the group");
  auto must_divide = [&](const char* what, int64_t n) {
    if (n % T != 0)
      throw std::invalid_argument(std::string(what) + " " + std::to_string(n) +
                                  " is not divisible by the tensor-parallel size " + std::to_string(T));
  };
  must_divide("model.heads", m.heads());
  // GPT-2 splits c_attn's and c_proj's width; a Llama splits heads (of any head size).
  if (!config::model_family(m).grouped_query) must_divide("model.width", m.width());
  must_divide("the MLP width (model.ffn_width)", config::ffn_width(m));
  must_divide("the padded vocabulary", spec.padded_vocab);
  tied_ = m.tied_embeddings();
  vocab_rows_ = spec.padded_vocab / T;
  vocab_begin_ = t * vocab_rows_;
  const bool llama = m.architecture() == ModelConfig::LLAMA;  // the family's tensors, by their Hugging Face names
  embedding_name_ = llama ? "model.embed_tokens.weight" : "wte.weight";
  if (llama)
    add_llama(spec);
  else
    add_gpt2(spec);
}

int64_t ParameterRegistry::add_vocab_table(const ModelSpec& spec, const std::string& name) {
  const auto& m = spec.model;
  const int64_t D = m.width(), Vp = spec.padded_vocab;
  return add_slice(name, {Vp, D}, {vocab_begin_, 0}, {vocab_rows_, D}, DecayGroup::kDecay, InitKind::kNormal,
                   m.init_std(), m.vocab_size());
}

void ParameterRegistry::add_gpt2(const ModelSpec& spec) {
  const auto& m = spec.model;
  const int64_t D = m.width(), F = config::ffn_width(m);
  const int T = slice_.size, t = slice_.rank;
  const int64_t Dt = D / T, Ft = F / T;
  const float std = m.init_std();
  const float proj_std = std / std::sqrt(2.0f * float(m.layers()));
  const auto W = DecayGroup::kDecay, NW = DecayGroup::kNoDecay;
  const auto N = InitKind::kNormal, Z = InitKind::kZeros, O = InitKind::kOnes;

  if (range_.has_embedding()) {
    wte_ = add_vocab_table(spec, embedding_name_);
    wpe_ = add("wpe.weight", {m.max_positions(), D}, W, N, std);
  }
  for (const int l : range_.layer_ids()) {
    const std::string p = "h." + std::to_string(l) + ".";
    BlockOffsets b;
    b.begin = total_;
    b.ln1_w = add(p + "ln_1.weight", {D}, NW, O, 0);
    b.ln1_b = add(p + "ln_1.bias", {D}, NW, Z, 0);
    if (T == 1) {
      b.qkv_w = add_slice(p + "attn.c_attn.weight", {D, 3 * D}, {0, 0}, {D, 3 * D}, W, N, std);
      b.qkv_b = add_slice(p + "attn.c_attn.bias", {3 * D}, {0}, {3 * D}, NW, Z, 0);
    } else {  // q, k and v pieces of this rank's heads
      b.qkv_w = total_;
      for (int64_t j = 0; j < 3; ++j)
        add_slice(p + "attn.c_attn.weight", {D, 3 * D}, {0, j * D + t * Dt}, {D, Dt}, W, N, std);
      b.qkv_b = total_;
      for (int64_t j = 0; j < 3; ++j) add_slice(p + "attn.c_attn.bias", {3 * D}, {j * D + t * Dt}, {Dt}, NW, Z, 0);
    }
    b.attn_proj_w = add_slice(p + "attn.c_proj.weight", {D, D}, {t * Dt, 0}, {Dt, D}, W, N, proj_std);
    b.attn_proj_b = add(p + "attn.c_proj.bias", {D}, NW, Z, 0);
    b.ln2_w = add(p + "ln_2.weight", {D}, NW, O, 0);
    b.ln2_b = add(p + "ln_2.bias", {D}, NW, Z, 0);
    b.fc_w = add_slice(p + "mlp.c_fc.weight", {D, F}, {0, t * Ft}, {D, Ft}, W, N, std);
    b.fc_b = add_slice(p + "mlp.c_fc.bias", {F}, {t * Ft}, {Ft}, NW, Z, 0);
    b.fc_proj_w = add_slice(p + "mlp.c_proj.weight", {F, D}, {t * Ft, 0}, {Ft, D}, W, N, proj_std);
    b.fc_proj_b = add(p + "mlp.c_proj.bias", {D}, NW, Z, 0);
    b.end = total_;
    blocks_.push_back(b);
  }
  if (range_.has_head(spec.model.layers())) {
    lnf_w_ = add("ln_f.weight", {D}, NW, O, 0);
    lnf_b_ = add("ln_f.bias", {D}, NW, Z, 0);
    add_head(spec);
  }
}

void ParameterRegistry::add_llama(const ModelSpec& spec) {
  const auto& m = spec.model;
  const int64_t D = m.width(), F = config::ffn_width(m);
  // hs: the head size (model.head_dim, or D / NH); A = NH hs the attention width.
  const int64_t NH = m.heads(), KV = config::kv_heads(m), hs = config::head_size(m), A = NH * hs;
  const int T = slice_.size, t = slice_.rank;
  const int64_t At = A / T, Ft = F / T;
  const float std = m.init_std();
  const float proj_std = std / std::sqrt(2.0f * float(m.layers()));
  const auto W = DecayGroup::kDecay, NW = DecayGroup::kNoDecay;
  const auto N = InitKind::kNormal, O = InitKind::kOnes;
  // k and v: split by kv heads when they divide over the group, else whole on every
  // rank (each rank reads the kv head of its query heads; model/layers/attention.h).
  const bool kv_split = KV % T == 0;
  const int64_t KVt = kv_split ? KV / T : KV;

  if (range_.has_embedding()) wte_ = add_vocab_table(spec, embedding_name_);
  for (const int l : range_.layer_ids()) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Linear weights in nn.Linear's layout [out, in]: column-parallel ones split rows
    // (out), row-parallel ones split columns (in).
    auto column = [&](const std::string& name, int64_t out, int64_t out_t) {
      return add_slice(p + name, {out, D}, {t * out_t, 0}, {out_t, D}, W, N, std);
    };
    BlockOffsets b;
    b.begin = total_;
    b.ln1_w = add(p + "input_layernorm.weight", {D}, NW, O, 0);
    b.q_w = column("self_attn.q_proj.weight", A, At);
    if (kv_split) {
      b.k_w = column("self_attn.k_proj.weight", KV * hs, KVt * hs);
      b.v_w = column("self_attn.v_proj.weight", KV * hs, KVt * hs);
    } else {
      b.k_w = add(p + "self_attn.k_proj.weight", {KV * hs, D}, W, N, std);
      b.v_w = add(p + "self_attn.v_proj.weight", {KV * hs, D}, W, N, std);
    }
    b.attn_proj_w = add_slice(p + "self_attn.o_proj.weight", {D, A}, {0, t * At}, {D, At}, W, N, proj_std);
    b.ln2_w = add(p + "post_attention_layernorm.weight", {D}, NW, O, 0);
    b.fc_w = column("mlp.gate_proj.weight", F, Ft);
    b.fc_up_w = column("mlp.up_proj.weight", F, Ft);
    b.fc_proj_w = add_slice(p + "mlp.down_proj.weight", {D, F}, {0, t * Ft}, {D, Ft}, W, N, proj_std);
    b.end = total_;
    blocks_.push_back(b);
  }
  if (range_.has_head(spec.model.layers())) {
    lnf_w_ = add("model.norm.weight", {D}, NW, O, 0);
    add_head(spec);
  }
}

void ParameterRegistry::add_head(const ModelSpec& spec) {
  if (!tied_) {
    head_ = add_vocab_table(spec, "lm_head.weight");
    return;
  }
  if (!range_.has_embedding()) {
    wte_ = add_vocab_table(spec, embedding_name_);
    tensors_.back().counts_in_norm = false;  // the first stage's copy is the one counted
  }
  head_ = wte_;
}

int64_t ParameterRegistry::add(std::string name, std::vector<int64_t> shape, DecayGroup g, InitKind init,
                               float std) {
  const int64_t offset = add_slice(std::move(name), shape, std::vector<int64_t>(shape.size(), 0), shape, g, init, std);
  if (slice_.size > 1) {
    tensors_.back().replicated = true;
    tensors_.back().counts_in_norm = slice_.rank == 0;  // rank 0's copy is the one counted
  }
  return offset;
}

int64_t ParameterRegistry::add_slice(std::string name, std::vector<int64_t> global_shape, std::vector<int64_t> start,
                                     std::vector<int64_t> shape, DecayGroup g, InitKind init, float std,
                                     int64_t valid_rows) {
  ParamTensor t;
  t.name = std::move(name);
  t.valid_rows = valid_rows >= 0 ? valid_rows : global_shape[0];
  t.global_shape = std::move(global_shape);
  t.slice_start = std::move(start);
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.offset = total_;
  t.group = g;
  t.init = init;
  t.init_std = std;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

StageRange ParameterRegistry::range() const {
  if (range_.chunks.size() != 1)
    throw std::logic_error("ParameterRegistry::range: the stage holds " + range_.str() + " (" +
                           std::to_string(range_.chunks.size()) + " model chunks), not one range");
  return range_.chunks.front();
}

const BlockOffsets& ParameterRegistry::block(int layer) const {
  const int i = range_.index_of(layer);
  if (i < 0) throw std::out_of_range("layer " + std::to_string(layer) + " is not held by the stage holding " + range_.str());
  return blocks_[size_t(i)];
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
