#include "model/gpt_stage.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "config/derived.h"
#include "config/model_family.h"
#include "model/architecture.h"
#include "model/block.h"
#include "model/init.h"
#include "model/layers/embedding.h"
#include "model/layers/head.h"
#include "model/layers/loss.h"
#include "model/layers/norm.h"
#include "model/layers/rope.h"
#include "model/layers/weight_grad_queue.h"

namespace troupe::model {

using kernels::Buffer;
using kernels::DType;

struct GptStage::Slot {
  // What the forward keeps for the backward (kActivations in the device's memory ledger):
  Buffer acts;  // every saved float activation (layout in the constructor; each block carves its own)
  Buffer ints;  // tokens | positions | targets | doc_start, each [B*T] at capacity
  Buffer mask;  // loss_mask [B*T]
  // What the backward hands to the previous stage (kScratch): the input gradient [BT, D]
  // (non-first stages).
  Buffer dinput;
  int B = 0, T = 0;
  int chunk = 0;        // the model chunk whose microbatches this slot holds
  int first_block = 0;  // the chunk's first block in blocks_, and its block count
  int layers = 0;
  int64_t first_slot = -1;  // the microbatch's (dropout masks; -1: none)
  bool forwarded = false;
  // Split backward (ZB-H1): the output gradients kept for the weight pass
  // (kActivations), the queued weight GEMMs, and the queue's size after each block
  // (from the last block down); awaiting_weight from backward_input to backward_weight.
  Buffer deferred;
  layers::WeightGradQueue queue;
  std::vector<size_t> block_marks;
  bool awaiting_weight = false;
  int64_t loss_tokens = 0;  // of this microbatch (last stage)
  int64_t global_loss_tokens = 0;
  // Offsets into acts (capacity layout).
  int64_t residual = 0;  // (layers + 1) x [Nr, D]; residual 0 is the chunk's input
  int64_t saved = 0;     // first block's saved activations; each block takes layer_stride
  int64_t layer_stride = 0;
  // The last chunk of the last stage: lnf [BT, D] (the final norm's output) | the final norm's saved floats |
  // logits [BT, ld] | lse [BT] | losses [BT].
  int64_t lnf = 0, lnf_saved = 0, logits = 0, lse = 0, losses = 0;
};

namespace {

std::string where(const data::Microbatch& mb, int64_t i, int T) {
  const int64_t row = i / T;
  std::string s = "microbatch row " + std::to_string(row);
  if (size_t(row) < mb.sample_ids.size()) s += " (sample " + std::to_string(mb.sample_ids[size_t(row)]) + ")";
  return s + ", position " + std::to_string(i % T);
}

}  // namespace

GptStage::GptStage(const ModelSpec& spec, StageRange range, kernels::Device& device, int slots, StageShape shape,
                   TensorParallel tp)
    : GptStage(spec, StageLayers::single(range), device, std::vector<int>{slots}, shape, std::move(tp)) {}

GptStage::GptStage(const ModelSpec& spec, StageLayers stage_layers, kernels::Device& device,
                   std::vector<int> chunk_slots, StageShape shape, TensorParallel tp)
    : seed_(spec.seed),
      device_(device),
      registry_(spec, std::move(stage_layers), TensorSlice{tp.rank(), tp.size()}),
      shape_(shape),
      last_(registry_.layers().has_head(spec.model.layers())),
      D_(spec.model.width()),
      V_(spec.model.vocab_size()),
      P_(spec.model.max_positions()),
      tp_(device, std::move(tp), int64_t(shape.micro_batch) * shape.seq) {
  if (int(chunk_slots.size()) != chunks())
    throw std::invalid_argument("GptStage: " + std::to_string(chunk_slots.size()) + " slot counts for " +
                                std::to_string(chunks()) + " model chunks");
  for (const int n : chunk_slots)
    if (n < 1) throw std::invalid_argument("GptStage: slots must be >= 1");
  if (shape.micro_batch < 1 || shape.seq < 1)
    throw std::invalid_argument("GptStage: micro batch and sequence length must be positive");
  // A Llama with model.head_dim set needs no split of the width by the heads.
  const int NH = spec.model.heads();
  if (NH < 1 || (D_ % NH != 0 && !(config::model_family(spec.model).grouped_query && spec.model.head_dim() > 0)))
    throw std::invalid_argument("model.width " + std::to_string(D_) + " is not divisible by model.heads " +
                                std::to_string(NH));
  if (shape.seq > P_)
    throw std::invalid_argument("sequence length " + std::to_string(shape.seq) + " exceeds model.max_positions " +
                                std::to_string(P_));
  // The registry checked that heads, ffn width and padded vocab split over the group.
  const int64_t BT = int64_t(shape.micro_batch) * shape.seq, D = D_;
  if (!tp_.splits(BT))
    throw std::invalid_argument("sequence parallelism: micro_batch_size x seq_length = " + std::to_string(BT) +
                                " tokens do not split over " + std::to_string(tp_.size()) +
                                " tensor-parallel ranks");
  const int64_t BTr = tp_.rows(BT);  // residual-stream rows held here
  params_ = device_.allocate_as(kernels::MemoryCategory::kWeights, registry_.total(), DType::kF32);
  grads_ = device_.allocate_as(kernels::MemoryCategory::kGradients, registry_.total(), DType::kF32);
  init_parameters();

  // The layers, over the two buffers.
  const Architecture arch = architecture(spec, registry_);
  const layers::Capacity cap{shape.micro_batch, shape.seq};
  float* P = params_.f32();
  float* G = grads_.f32();
  if (is_first())
    embedding_ = std::make_unique<layers::Embedding>(arch.embedding, embedding_weights(registry_, P, G), tp_);
  if (arch.rope && layers().layers() > 0) rope_ = std::make_unique<layers::Rope>(*arch.rope, device_);
  blocks_.reserve(size_t(layers().layers()));
  int64_t L = 0;  // blocks of the largest chunk
  for (const StageRange& range : layers().chunks) {
    chunk_first_block_.push_back(int(blocks_.size()));
    L = std::max<int64_t>(L, range.layers());
    for (int l = range.first_layer; l < range.last_layer; ++l) {
      BlockConfig block = block_config(arch, l);
      block.attention.rope = rope_.get();
      blocks_.push_back(std::make_unique<Block>(block, block_weights(registry_, l, P, G), tp_, cap));
    }
  }
  if (last_) {
    final_norm_ = layers::make_norm(arch.final_norm, final_norm_weights(registry_, P, G), device_, BTr);
    head_ = std::make_unique<layers::Head>(arch.head, head_weight(registry_, P, G), tp_);
    loss_ = std::make_unique<layers::Loss>(arch.loss, tp_);
  }

  const int64_t layer_stride = L > 0 ? blocks_.front()->saved_floats() : 0;
  // Full recomputation (model.recompute FULL): UNIFORM replays every layer, BLOCK the
  // first recompute_num_layers of the stage (of each chunk); the others keep their
  // saved activations.
  const auto& m = spec.model;
  // The split backward's weight pass reads the linears' inputs in the slot, which
  // recomputation keeps elsewhere (config/validate.cpp refuses the pair first).
  split_ = spec.split_backward;
  if (split_ && m.recompute() != ModelConfig::NONE)
    throw std::invalid_argument("GptStage: a split backward (parallel.schedule ZB_H1) needs model.recompute NONE "
                                "(the weight pass reads the activations recomputation does not keep)");
  if (split_ && chunks() > 1)
    throw std::invalid_argument("GptStage: a split backward (parallel.schedule ZB_H1) runs one model chunk a "
                                "stage, not " + std::to_string(chunks()));
  if (split_) {
    if (is_first()) slot_deferred_floats_ += layers::Embedding::deferred_floats(BT, D_);
    for (const auto& b : blocks_) slot_deferred_floats_ += b->deferred_floats();
  }
  int64_t stored = 0;
  for (int64_t l = 0; l < L; ++l) {
    const bool replay = m.recompute() == ModelConfig::FULL &&
                        (m.recompute_method() == ModelConfig::UNIFORM || l < m.recompute_num_layers());
    stored_at_.push_back(replay ? -1 : stored++);
  }
  for (int ch = 0; ch < chunks(); ++ch) {
    slot_base_.push_back(int(slots_.size()));
    chunk_slots_.push_back(chunk_slots[size_t(ch)]);
    for (int i = 0; i < chunk_slots[size_t(ch)]; ++i) {
      Slot& s = slots_.emplace_back();
      s.chunk = ch;
      s.first_block = chunk_first_block_[size_t(ch)];
      s.layers = layers().chunks[size_t(ch)].layers();
    }
  }
  for (auto& s : slots_) {
    const int64_t chunk_stored = std::count_if(stored_at_.begin(), stored_at_.begin() + s.layers,
                                               [](int64_t at) { return at >= 0; });
    int64_t off = 0;
    s.residual = off;
    off += (s.layers + 1) * BTr * D;
    s.saved = off;
    s.layer_stride = layer_stride;
    off += chunk_stored * layer_stride;
    if (slot_is_last(s)) {
      s.lnf = off;
      off += BT * D;
      s.lnf_saved = off;
      off += final_norm_->saved_floats();
      s.logits = off;
      off += BT * head_->ld();
      s.lse = off;
      off += BT;
      s.losses = off;
      off += BT;
    }
    const int64_t saved_floats = off + 5 * BT + slot_deferred_floats_;  // + ints + mask + the weight pass's
    using kernels::MemoryCategory;
    if (split_) {
      s.deferred = device_.allocate_as(MemoryCategory::kActivations, slot_deferred_floats_, DType::kF32);
      s.block_marks.reserve(size_t(L));
    }
    s.acts = device_.allocate_as(MemoryCategory::kActivations, off, DType::kF32);
    s.ints = device_.allocate_as(MemoryCategory::kActivations, 4 * BT, DType::kI32);
    s.mask = device_.allocate_as(MemoryCategory::kActivations, BT, DType::kF32);
    // [BTr, D] used; sized [BT, D] so that a reader taking B*T rows (a runtime that
    // does not know about sequence shards) stays inside it.
    if (!slot_is_first(s)) s.dinput = device_.allocate_as(MemoryCategory::kScratch, BT * D, DType::kF32);
    const int64_t floats = saved_floats + (slot_is_first(s) ? 0 : BT * D);
    slot_saved_floats_ = std::max(slot_saved_floats_, saved_floats);
    slot_floats_ = std::max(slot_floats_, floats);
    all_slot_floats_ += floats;
  }
  // The widest per-token scratch any layer needs; the loss's gathered partials are
  // counted on every stage so that the figure does not depend on the cut.
  int64_t width = 3 * int64_t(tp_.size());
  for (const auto& b : blocks_) width = std::max(width, b->scratch_width());
  // dres [BT, D] | small [BT, D] | big [BT, width], then what dropout and recomputation add.
  int64_t recompute = 0;
  for (const auto& b : blocks_) recompute = std::max(recompute, b->recompute_floats());
  scratch_floats_ = BT * D * 2 + BT * width;
  auto add = [&](int64_t& offset, int64_t floats) {
    offset = scratch_floats_;
    scratch_floats_ += floats;
  };
  if (m.hidden_dropout() > 0) add(masked_off_, BT * D);
  if (recompute > 0) add(recompute_off_, recompute);
  if (stored < L) {
    add(replay_saved_off_, layer_stride);
    add(replay_out_off_, BTr * D);
  }
  scratch_ = device_.allocate_as(kernels::MemoryCategory::kScratch, scratch_floats_, DType::kF32);
  const std::vector<layers::TpContext::Span> partial = partial_grads();
  int64_t staged = 1;
  for (const auto& sp : partial) staged += sp.n;
  if (!partial.empty()) tp_.allocate_grad_staging(staged);
  host_ints_.resize(size_t(4 * BT));
  host_losses_.resize(size_t(BT));
}

GptStage::~GptStage() = default;

bool GptStage::slot_is_first(const Slot& s) const { return chunk_is_first(s.chunk); }
bool GptStage::slot_is_last(const Slot& s) const { return chunk_is_last(s.chunk); }

int GptStage::slots() const { return int(slots_.size()); }

int64_t GptStage::table_floats() const { return rope_ ? rope_->table_floats() : 0; }

int64_t GptStage::activation_rows(int B, int T) const { return tp_.rows(int64_t(B) * T); }

void GptStage::zero_grads() { device_.fill_zero(grads(), size_t(registry_.total()) * sizeof(float)); }

void GptStage::init_parameters() {
  std::vector<float> host(size_t(registry_.total()));
  init_parameters_into(host.data());
  device_.copy_from_host(params(), host.data(), host.size() * sizeof(float));
}

void GptStage::init_parameters_into(float* host) const { model::init_parameters(registry_, seed_, host, 4); }

GptStage::Slot& GptStage::check_slot(int slot, const char* what) {
  if (slot < 0 || slot >= int(slots_.size()))
    throw std::out_of_range(std::string(what) + ": slot " + std::to_string(slot) + " outside [0, " +
                            std::to_string(slots_.size()) + ")");
  return slots_[size_t(slot)];
}

const GptStage::Slot& GptStage::check_slot(int slot, const char* what) const {
  return const_cast<GptStage*>(this)->check_slot(slot, what);
}

float* GptStage::residual(Slot& s, int l) const {
  const int64_t capR = tp_.rows(int64_t(shape_.micro_batch) * shape_.seq);
  return s.acts.f32() + s.residual + int64_t(l) * capR * D_;
}

float* GptStage::block_saved(Slot& s, int l) const {
  const int64_t at = stored_at_[size_t(l)];
  if (at < 0) return const_cast<float*>(scratch_.f32()) + replay_saved_off_;  // replayed in backward
  return s.acts.f32() + s.saved + at * s.layer_stride;
}

layers::Workspace GptStage::workspace() {
  const int64_t cap = int64_t(shape_.micro_batch) * shape_.seq;
  // scratch_ starts with dres [cap, D], the residual gradient the stage itself keeps.
  float* base = scratch_.f32();
  auto at = [&](int64_t offset) { return offset < 0 ? nullptr : base + offset; };
  return {base + cap * D_, base + 2 * cap * D_, at(masked_off_), at(recompute_off_)};
}

// Checks the microbatch against the stage and copies what the kernels read into the
// slot: token/position/target IDs, the loss mask and each token's document start.
void GptStage::load_microbatch(Slot& s, const data::Microbatch& mb) {
  const int B = mb.batch, T = mb.seq;
  if (B < 1 || T < 1 || B > shape_.micro_batch || T > shape_.seq)
    throw std::invalid_argument("microbatch of " + std::to_string(B) + " x " + std::to_string(T) +
                                " does not fit the stage's " + std::to_string(shape_.micro_batch) + " x " +
                                std::to_string(shape_.seq) + " (micro_batch_size x seq_length)");
  const size_t n = size_t(B) * size_t(T);
  if (!tp_.splits(int64_t(n)))
    throw std::invalid_argument("microbatch of " + std::to_string(B) + " x " + std::to_string(T) +
                                " tokens does not split over " + std::to_string(tp_.size()) +
                                " tensor-parallel ranks (sequence parallelism)");
  auto check_size = [&](const char* field, size_t have) {
    if (have != n)
      throw std::invalid_argument(std::string("microbatch ") + field + " has " + std::to_string(have) +
                                  " entries, expected batch x seq = " + std::to_string(n));
  };
  check_size("segments", mb.segments.size());
  int32_t* tokens = host_ints_.data();
  int32_t* positions = tokens + n;
  int32_t* targets = positions + n;
  int32_t* doc_start = targets + n;
  if (is_first()) {
    check_size("tokens", mb.tokens.size());
    for (size_t i = 0; i < n; ++i) {
      if (mb.tokens[i] < 0 || mb.tokens[i] >= V_)
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": token " + std::to_string(mb.tokens[i]) +
                                    " outside [0, vocab_size " + std::to_string(V_) + ")");
      tokens[i] = mb.tokens[i];
    }
  }
  // Learned positions are read by the embedding (first stage), rotary ones by every block.
  if (is_first() || rope_) {
    check_size("positions", mb.positions.size());
    for (size_t i = 0; i < n; ++i) {
      if (mb.positions[i] < 0 || mb.positions[i] >= P_)
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": position ID " + std::to_string(mb.positions[i]) +
                                    " outside [0, max_positions " + std::to_string(P_) + ")");
      positions[i] = mb.positions[i];
    }
  }
  // Documents are contiguous runs of equal segment IDs; an ID may not come back
  // after another one started (that would not be a packed window).
  for (int b = 0; b < B; ++b) {
    const int32_t* seg = mb.segments.data() + size_t(b) * T;
    int start = 0;
    for (int t = 0; t < T; ++t) {
      if (t > 0 && seg[t] != seg[t - 1]) {
        for (int u = 0; u < t; ++u)
          if (seg[u] == seg[t])
            throw std::invalid_argument(where(mb, int64_t(b) * T + t, T) + ": segment " + std::to_string(seg[t]) +
                                        " resumes after another document started (segments must be contiguous)");
        start = t;
      }
      doc_start[size_t(b) * T + t] = start;
    }
  }
  if (slot_is_last(s)) {
    check_size("targets", mb.targets.size());
    check_size("loss_mask", mb.loss_mask.size());
    int64_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      const float m = mb.loss_mask[i];
      if (m != 0.0f && m != 1.0f)
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": loss_mask " + std::to_string(m) + " is not 0 or 1");
      if (m != 0.0f && (mb.targets[i] < 0 || mb.targets[i] >= V_))
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": target " + std::to_string(mb.targets[i]) +
                                    " outside [0, vocab_size " + std::to_string(V_) + ")");
      targets[i] = m != 0.0f ? mb.targets[i] : 0;
      count += m != 0.0f;
    }
    if (count > 0 && mb.global_loss_tokens < count)
      throw std::invalid_argument("microbatch global_loss_tokens " + std::to_string(mb.global_loss_tokens) +
                                  " is below its own " + std::to_string(count) + " loss-bearing tokens");
    device_.copy_from_host(s.mask.f32(), mb.loss_mask.data(), n * sizeof(float));
    s.loss_tokens = count;
    s.global_loss_tokens = mb.global_loss_tokens;
  }
  // Capacity layout of ints: 4 arrays of capacity B*T each.
  const size_t cap = size_t(shape_.micro_batch) * size_t(shape_.seq);
  int32_t* dst = s.ints.i32();
  for (int k = 0; k < 4; ++k) device_.copy_from_host(dst + k * cap, host_ints_.data() + k * n, n * sizeof(int32_t));
  s.B = B;
  s.T = T;
  s.first_slot = mb.first_slot;
}

std::vector<layers::TpContext::Span> GptStage::partial_grads() const {
  // In layout order: every block's (its norms under sequence parallelism, a
  // grouped-query attention's replicated k and v), then the final norm's.
  std::vector<layers::TpContext::Span> spans;
  for (const auto& b : blocks_) b->partial_grads(spans);
  if (last_ && tp_.sequence()) final_norm_->row_sharded_grads(spans);
  return spans;
}

void GptStage::reduce_tensor_parallel_grads() { tp_.sum_row_sharded_grads(partial_grads()); }

double sum_token_losses(const float* losses, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(losses[i]);
  return sum;
}

StageLoss GptStage::forward(int slot, const data::Microbatch& mb, const float* input) {
  StageLoss out;
  out.loss_tokens = issue_forward(slot, mb, input);
  if (slot_is_last(slots_[size_t(slot)])) {
    const Slot& s = slots_[size_t(slot)];
    const int64_t n = int64_t(s.B) * s.T;
    device_.copy_to_host(host_losses_.data(), token_losses(slot), size_t(n) * sizeof(float));
    out.loss_sum = sum_token_losses(host_losses_.data(), n);
  }
  return out;
}

int64_t GptStage::issue_forward(int slot, const data::Microbatch& mb, const float* input) {
  Slot& s = check_slot(slot, "GptStage::forward");
  if (s.awaiting_weight)
    throw std::logic_error("GptStage::forward: slot " + std::to_string(slot) +
                           " still holds what its backward_weight needs");
  const bool first = slot_is_first(s), last = slot_is_last(s);
  if (first != (input == nullptr))
    throw std::invalid_argument(first ? "GptStage::forward: the first stage takes no input activations"
                                      : "GptStage::forward: a non-first stage (or chunk) needs input activations");
  s.forwarded = false;
  load_microbatch(s, mb);
  const int B = s.B, T = s.T, BT = B * T, D = D_;
  const int64_t Nr = tp_.rows(BT);  // residual rows held here
  const size_t cap = size_t(shape_.micro_batch) * size_t(shape_.seq);
  const int32_t* tokens = s.ints.i32();
  const int32_t* positions = tokens + cap;
  const int32_t* targets = tokens + 2 * cap;
  const int32_t* doc_start = tokens + 3 * cap;
  float* acts = s.acts.f32();
  const layers::Workspace ws = workspace();

  const layers::Sequence seq{doc_start, positions, B, T, s.first_slot};
  if (first)
    embedding_->forward(residual(s, 0), tokens, seq, ws.small);
  else
    device_.copy(residual(s, 0), input, size_t(Nr) * size_t(D) * sizeof(float));

  for (int l = 0; l < s.layers; ++l)
    blocks_[size_t(s.first_block + l)]->forward(block_saved(s, l), residual(s, l + 1), residual(s, l), seq, ws);

  if (last) {
    float* lnf = acts + s.lnf;  // [BT, D], this rank's rows written by the norm
    final_norm_->forward(acts + s.lnf_saved, lnf + tp_.first_row(BT) * D, residual(s, s.layers), int(Nr));
    head_->forward(acts + s.logits, lnf, BT);
    loss_->forward(acts + s.losses, acts + s.lse, acts + s.logits, targets, s.mask.f32(), BT, ws);
  }
  s.forwarded = true;
  return last ? s.loss_tokens : 0;
}

void GptStage::backward(int slot, const float* grad_output, const std::function<void(FlatRange)>& block_done) {
  Slot& s = check_slot(slot, "GptStage::backward");
  if (!s.forwarded) throw std::logic_error("GptStage::backward: slot " + std::to_string(slot) + " holds no forward");
  const bool first = slot_is_first(s), last = slot_is_last(s);
  if (last != (grad_output == nullptr))
    throw std::invalid_argument(last ? "GptStage::backward: the last stage takes no output gradient"
                                     : "GptStage::backward: a non-last stage (or chunk) needs the output gradient");
  run_backward(s, grad_output, block_done, nullptr);
}

void GptStage::backward_input(int slot, const float* grad_output) {
  Slot& s = check_slot(slot, "GptStage::backward_input");
  if (!split_)
    throw std::logic_error("GptStage::backward_input: the stage was not built for the split backward "
                           "(parallel.schedule ZB_H1)");
  if (!s.forwarded)
    throw std::logic_error("GptStage::backward_input: slot " + std::to_string(slot) + " holds no forward");
  const bool last = slot_is_last(s);
  if (last != (grad_output == nullptr))
    throw std::invalid_argument(last ? "GptStage::backward_input: the last stage takes no output gradient"
                                     : "GptStage::backward_input: a non-last stage needs the output gradient");
  s.queue.reset(s.deferred.f32(), slot_deferred_floats_);
  s.block_marks.clear();
  run_backward(s, grad_output, {}, &s.queue);
  s.awaiting_weight = true;
}

void GptStage::backward_weight(int slot, const std::function<void(FlatRange)>& block_done) {
  Slot& s = check_slot(slot, "GptStage::backward_weight");
  if (!s.awaiting_weight)
    throw std::logic_error("GptStage::backward_weight: slot " + std::to_string(slot) +
                           " has no backward_input waiting for its weight pass");
  // The head's GEMM (last stage) comes before the last block's mark, the embedding's
  // scatter (first stage) after the first block's.
  const int first_layer = layers().chunks[size_t(s.chunk)].first_layer;
  for (size_t i = 0; i < s.block_marks.size(); ++i) {
    s.queue.run_until(s.block_marks[i]);
    const BlockOffsets& o = registry_.block(first_layer + s.layers - 1 - int(i));
    if (block_done) block_done({o.begin, o.end});
  }
  s.queue.run();
  s.awaiting_weight = false;
}

void GptStage::run_backward(Slot& s, const float* grad_output, const std::function<void(FlatRange)>& block_done,
                            layers::WeightGradQueue* defer) {
  const bool first = slot_is_first(s), last = slot_is_last(s);
  const int B = s.B, T = s.T, BT = B * T, D = D_;
  const int64_t Nr = tp_.rows(BT);
  const size_t cap = size_t(shape_.micro_batch) * size_t(shape_.seq);
  const int32_t* tokens = s.ints.i32();
  const int32_t* positions = tokens + cap;
  const int32_t* targets = tokens + 2 * cap;
  const int32_t* doc_start = tokens + 3 * cap;
  float* acts = s.acts.f32();
  layers::Workspace ws = workspace();
  ws.defer = defer;
  float* dres = scratch_.f32();                // [BT, D] gradient of the residual stream (all rows)
  float* dres_mine = dres + tp_.first_row(BT) * D;  // [Nr, D] the rows this rank holds

  if (last) {
    float* logits = acts + s.logits;
    const float scale = s.global_loss_tokens > 0 ? 1.0f / float(s.global_loss_tokens) : 0.0f;
    // dlogits (in place) = loss_mask / global_loss_tokens * (softmax - onehot)
    loss_->backward(logits, logits, acts + s.lse, targets, s.mask.f32(), scale, BT);
    const float* dlnf = head_->backward(ws.small, logits, acts + s.lnf, BT, defer);
    device_.fill_zero(dres_mine, size_t(Nr) * size_t(D) * sizeof(float));
    final_norm_->backward(acts + s.lnf_saved, dres_mine, dlnf, residual(s, s.layers), int(Nr));
  } else {
    device_.copy(dres_mine, grad_output, size_t(Nr) * size_t(D) * sizeof(float));
  }

  const layers::Sequence seq{doc_start, positions, B, T, s.first_slot};
  const int first_layer = layers().chunks[size_t(s.chunk)].first_layer;
  for (int l = s.layers - 1; l >= 0; --l) {
    Block& block = *blocks_[size_t(s.first_block + l)];
    // Full recomputation: the block's forward again from its kept input (the same
    // kernels on the same inputs, the same dropout masks: the same bits), into the
    // replay buffers, then its backward from there.
    if (stored_at_[size_t(l)] < 0)
      block.forward(block_saved(s, l), scratch_.f32() + replay_out_off_, residual(s, l), seq, ws);
    block.backward(block_saved(s, l), dres, residual(s, l), seq, ws);
    const BlockOffsets& o = registry_.block(first_layer + l);
    if (block_done) block_done({o.begin, o.end});
    if (defer) s.block_marks.push_back(defer->size());
  }

  if (first)
    embedding_->backward(dres, tokens, seq, defer);
  else
    device_.copy(s.dinput.f32(), dres_mine, size_t(Nr) * size_t(D) * sizeof(float));
  s.forwarded = false;
}

const float* GptStage::output(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::output");
  if (slot_is_last(s)) throw std::logic_error("GptStage::output: the last stage returns a loss, not activations");
  return residual(const_cast<Slot&>(s), s.layers);
}

const float* GptStage::input_grad(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::input_grad");
  if (slot_is_first(s)) throw std::logic_error("GptStage::input_grad: the first stage has no input activations");
  return s.dinput.f32();
}

const float* GptStage::logits(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::logits");
  if (!slot_is_last(s)) throw std::logic_error("GptStage::logits: only the last stage computes logits");
  return s.acts.f32() + s.logits;
}

const float* GptStage::token_losses(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::token_losses");
  if (!slot_is_last(s)) throw std::logic_error("GptStage::token_losses: only the last stage computes the loss");
  return s.acts.f32() + s.losses;
}

}  // namespace troupe::model
