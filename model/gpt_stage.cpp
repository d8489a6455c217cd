#include "model/gpt_stage.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "config/derived.h"
#include "model/init.h"
#include "model/qkv_pieces.h"

namespace troupe::model {

using kernels::Buffer;
using kernels::DType;

struct GptStage::Slot {
  Buffer acts;  // every saved float activation (layout in layer_acts / constructor)
  Buffer ints;  // tokens | positions | targets | doc_start, each [B*T] at capacity
  Buffer mask;  // loss_mask [B*T]
  int B = 0, T = 0;
  bool forwarded = false;
  int64_t loss_tokens = 0;  // of this microbatch (last stage)
  int64_t global_loss_tokens = 0;
  // Offsets into acts (capacity layout).
  int64_t residual = 0;  // (layers + 1) x [Nr, D]; residual 0 is the stage input
  int64_t layers = 0;    // first block's activations; each block takes layer_stride
  int64_t layer_stride = 0;
  int64_t lnf = 0, lnf_mean = 0, lnf_rstd = 0, logits = 0, lse = 0, losses = 0;  // lnf [BT, D]
  int64_t dinput = 0;
};

// One block's saved activations (capacity layout; kernels use the actual prefix).
// N = B*T tokens; Nr = N, or N / T under sequence parallelism (this rank's rows);
// Dt, Ft: this rank's attention and MLP widths; NHt its heads (all = D, F, NH at T = 1).
struct GptStage::LayerActs {
  float* ln1;       // [N, D]    ln_1 output (input of c_attn), all rows (gathered under SP)
  float* ln1_mean;  // [Nr]
  float* ln1_rstd;  // [Nr]
  float* qkv;       // [N, 3Dt]
  float* att;       // [B, NHt, T, T] attention probabilities
  float* atty;      // [N, Dt]   attention output (input of attn.c_proj)
  float* res2;      // [Nr, D]   residual after the attention half
  float* ln2;       // [N, D]    all rows (gathered under SP)
  float* ln2_mean;  // [Nr]
  float* ln2_rstd;  // [Nr]
  float* fch;       // [N, Ft]   c_fc output before GELU
  float* fch_gelu;  // [N, Ft]   GELU output (input of mlp.c_proj)
};

namespace {

std::string where(const data::Microbatch& mb, int64_t i, int T) {
  const int64_t row = i / T;
  std::string s = "microbatch row " + std::to_string(row);
  if (size_t(row) < mb.sample_ids.size()) s += " (sample " + std::to_string(mb.sample_ids[size_t(row)]) + ")";
  return s + ", position " + std::to_string(i % T);
}

}  // namespace

GptStage::GptStage(const Config& c, StageRange range, kernels::Device& device, int slots, StageShape shape,
                   TensorParallel tp)
    : config_(c),
      device_(device),
      registry_(c, range, TensorSlice{tp.rank(), tp.size()}),
      shape_(shape),
      last_(range.has_head(c)),
      D_(c.model().width()),
      F_(int(config::ffn_width(c.model()))),
      NH_(c.model().heads()),
      V_(c.model().vocab_size()),
      Vp_(int(config::padded_vocab(c))),
      P_(c.model().max_positions()),
      ln_eps_(c.model().layernorm_eps()),
      tp_(std::move(tp)) {
  if (slots < 1) throw std::invalid_argument("GptStage: slots must be >= 1");
  if (shape.micro_batch < 1 || shape.seq < 1)
    throw std::invalid_argument("GptStage: micro batch and sequence length must be positive");
  if (NH_ < 1 || D_ % NH_ != 0)
    throw std::invalid_argument("model.width " + std::to_string(D_) + " is not divisible by model.heads " +
                                std::to_string(NH_));
  if (shape.seq > P_)
    throw std::invalid_argument("sequence length " + std::to_string(shape.seq) + " exceeds model.max_positions " +
                                std::to_string(P_));
  // The registry checked that heads, ffn width and padded vocab split over T.
  T_ = tp_.config().size();
  sp_ = tp_.config().sequence();
  Dt_ = D_ / T_;
  NHt_ = NH_ / T_;
  Ft_ = F_ / T_;
  Vpt_ = Vp_ / T_;
  vocab_begin_ = int(registry_.vocab_begin());
  Vt_ = std::clamp(V_ - vocab_begin_, 0, Vpt_);
  ld_logits_ = T_ == 1 ? Vp_ : Vpt_;
  const int64_t BT = int64_t(shape.micro_batch) * shape.seq, D = D_;
  if (sp_ && BT % T_ != 0)
    throw std::invalid_argument("sequence parallelism: micro_batch_size x seq_length = " + std::to_string(BT) +
                                " tokens do not split over " + std::to_string(T_) + " tensor-parallel ranks");
  const int64_t BTr = sp_ ? BT / T_ : BT;  // residual-stream rows held here
  params_ = device_.allocate(registry_.total(), DType::kF32);
  grads_ = device_.allocate(registry_.total(), DType::kF32);
  init_parameters();

  const int64_t L = range.layers();
  const int64_t layer_stride = BT * D * 2 + BTr * D + BTr * 4 + BT * 3 * Dt_ + BT * Dt_ + BT * 2 * Ft_ +
                               int64_t(shape.micro_batch) * NHt_ * shape.seq * shape.seq;
  slots_.resize(size_t(slots));
  for (auto& s : slots_) {
    int64_t off = 0;
    s.residual = off;
    off += (L + 1) * BTr * D;
    s.layers = off;
    s.layer_stride = layer_stride;
    off += L * layer_stride;
    if (last_) {
      s.lnf = off;
      off += BT * D;
      s.lnf_mean = off;
      off += BTr;
      s.lnf_rstd = off;
      off += BTr;
      s.logits = off;
      off += BT * ld_logits_;
      s.lse = off;
      off += BT;
      s.losses = off;
      off += BT;
    }
    if (!is_first()) {
      // [BTr, D] used; sized [BT, D] so that a reader taking B*T rows (a runtime that
      // does not know about sequence shards) stays inside the slot.
      s.dinput = off;
      off += BT * D;
    }
    slot_floats_ = off;
    s.acts = device_.allocate(off, DType::kF32);
    s.ints = device_.allocate(4 * BT, DType::kI32);
    s.mask = device_.allocate(BT, DType::kF32);
  }
  slot_floats_ += 5 * BT;  // ints + mask
  scratch_floats_ = BT * D * 2 + BT * std::max<int64_t>({3 * Dt_, Ft_, 3 * T_});
  scratch_ = device_.allocate(scratch_floats_, DType::kF32);
  if (T_ > 1) {
    ones_ = device_.allocate(BT, DType::kF32);
    const std::vector<float> ones(size_t(BT), 1.0f);
    device_.copy_from_host(ones_.f32(), ones.data(), ones.size() * sizeof(float));
  }
  if (sp_) ln_staging_ = device_.allocate(2 * D * (2 * L + (last_ ? 1 : 0)) + 1, DType::kF32);
  host_ints_.resize(size_t(4 * BT));
  host_losses_.resize(size_t(BT));
}

GptStage::~GptStage() = default;

int GptStage::slots() const { return int(slots_.size()); }

int64_t GptStage::activation_rows(int B, int T) const {
  const int64_t n = int64_t(B) * T;
  return sp_ ? n / T_ : n;
}

void GptStage::zero_grads() { device_.fill_zero(grads(), size_t(registry_.total()) * sizeof(float)); }

void GptStage::init_parameters() {
  std::vector<float> host(size_t(registry_.total()));
  init_parameters_into(host.data());
  device_.copy_from_host(params(), host.data(), host.size() * sizeof(float));
}

void GptStage::init_parameters_into(float* host) const {
  model::init_parameters(registry_, config_.training().seed(), host, 4);
}

GptStage::Slot& GptStage::check_slot(int slot, const char* what) {
  if (slot < 0 || slot >= int(slots_.size()))
    throw std::out_of_range(std::string(what) + ": slot " + std::to_string(slot) + " outside [0, " +
                            std::to_string(slots_.size()) + ")");
  return slots_[size_t(slot)];
}

const GptStage::Slot& GptStage::check_slot(int slot, const char* what) const {
  return const_cast<GptStage*>(this)->check_slot(slot, what);
}

GptStage::LayerActs GptStage::layer_acts(Slot& s, int l) {
  const int64_t BT = int64_t(shape_.micro_batch) * shape_.seq, D = D_;
  const int64_t BTr = sp_ ? BT / T_ : BT;
  float* p = s.acts.f32() + s.layers + int64_t(l) * s.layer_stride;
  LayerActs a;
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  a.ln1 = take(BT * D);
  a.ln1_mean = take(BTr);
  a.ln1_rstd = take(BTr);
  a.qkv = take(BT * 3 * Dt_);
  a.att = take(int64_t(shape_.micro_batch) * NHt_ * shape_.seq * shape_.seq);
  a.atty = take(BT * Dt_);
  a.res2 = take(BTr * D);
  a.ln2 = take(BT * D);
  a.ln2_mean = take(BTr);
  a.ln2_rstd = take(BTr);
  a.fch = take(BT * Ft_);
  a.fch_gelu = take(BT * Ft_);
  return a;
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
  if (sp_ && n % size_t(T_) != 0)
    throw std::invalid_argument("microbatch of " + std::to_string(B) + " x " + std::to_string(T) +
                                " tokens does not split over " + std::to_string(T_) +
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
    check_size("positions", mb.positions.size());
    for (size_t i = 0; i < n; ++i) {
      if (mb.tokens[i] < 0 || mb.tokens[i] >= V_)
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": token " + std::to_string(mb.tokens[i]) +
                                    " outside [0, vocab_size " + std::to_string(V_) + ")");
      if (mb.positions[i] < 0 || mb.positions[i] >= P_)
        throw std::invalid_argument(where(mb, int64_t(i), T) + ": position ID " + std::to_string(mb.positions[i]) +
                                    " outside [0, max_positions " + std::to_string(P_) + ")");
      tokens[i] = mb.tokens[i];
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
  if (last_) {
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
}


void GptStage::row_parallel_forward(float* out, const float* inp, const float* w, const float* b,
                                    const float* residual, int N, int K) {
  if (T_ == 1) {
    device_.linear_forward(out, nullptr, inp, w, b, residual, N, K, D_);
    return;
  }
  const bool owner = tp_.config().rank() == 0;  // adds bias (and residual) once
  if (!sp_) {
    // out = (residual + b + inp W)_0 + (inp W)_1 + ...: every rank ends with the same sum.
    device_.linear_forward(out, nullptr, inp, w, owner ? b : nullptr, owner ? residual : nullptr, N, K, D_);
    tp_.all_reduce(out, N, D_);
    return;
  }
  float* partial = scratch_.f32() + int64_t(shape_.micro_batch) * shape_.seq * D_;  // dsmall [N, D]
  device_.linear_forward(partial, nullptr, inp, w, owner ? b : nullptr, nullptr, N, K, D_);
  tp_.reduce_scatter_rows(partial, out, N, D_);
  device_.add(out, out, residual, int64_t(N / T_) * D_);
}

float* GptStage::reduce_input_grad(float* dx, int N) {
  if (!sp_) {
    tp_.all_reduce(dx, N, D_);
    return dx;
  }
  float* mine = dx + int64_t(tp_.config().rank()) * (N / T_) * D_;
  tp_.reduce_scatter_rows(dx, mine, N, D_);
  return mine;
}

void GptStage::reduce_tensor_parallel_grads() {
  if (!sp_) return;
  // ln_1 and ln_2 weight | bias of every block, then ln_f: gathered into one staging
  // vector, summed over the group in one collective, and put back.
  std::vector<int64_t> offsets;
  for (int l = range().first_layer; l < range().last_layer; ++l) {
    offsets.push_back(registry_.block(l).ln1_w);  // ln_1.weight, ln_1.bias adjacent
    offsets.push_back(registry_.block(l).ln2_w);
  }
  if (last_) offsets.push_back(registry_.lnf_w_offset());
  const int64_t chunk = 2 * int64_t(D_);
  float* stage = ln_staging_.f32();
  for (size_t i = 0; i < offsets.size(); ++i)
    device_.copy(stage + int64_t(i) * chunk, grads() + offsets[i], size_t(chunk) * sizeof(float));
  tp_.all_reduce_flat(stage, int64_t(offsets.size()) * chunk);
  for (size_t i = 0; i < offsets.size(); ++i)
    device_.copy(grads() + offsets[i], stage + int64_t(i) * chunk, size_t(chunk) * sizeof(float));
}

double sum_token_losses(const float* losses, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(losses[i]);
  return sum;
}

StageLoss GptStage::forward(int slot, const data::Microbatch& mb, const float* input) {
  StageLoss out;
  out.loss_tokens = issue_forward(slot, mb, input);
  if (last_) {
    const Slot& s = slots_[size_t(slot)];
    const int64_t n = int64_t(s.B) * s.T;
    device_.copy_to_host(host_losses_.data(), token_losses(slot), size_t(n) * sizeof(float));
    out.loss_sum = sum_token_losses(host_losses_.data(), n);
  }
  return out;
}

int64_t GptStage::issue_forward(int slot, const data::Microbatch& mb, const float* input) {
  Slot& s = check_slot(slot, "GptStage::forward");
  if (is_first() != (input == nullptr))
    throw std::invalid_argument(is_first() ? "GptStage::forward: the first stage takes no input activations"
                                           : "GptStage::forward: a non-first stage needs input activations");
  s.forwarded = false;
  load_microbatch(s, mb);
  const int B = s.B, T = s.T, BT = B * T, D = D_;
  const int Nr = sp_ ? BT / T_ : BT;                   // residual rows held here
  const int64_t r0 = sp_ ? int64_t(tp_.config().rank()) * Nr : 0;  // their first token
  const size_t cap = size_t(shape_.micro_batch) * size_t(shape_.seq);
  const int32_t* tokens = s.ints.i32();
  const int32_t* positions = tokens + cap;
  const int32_t* targets = tokens + 2 * cap;
  const int32_t* doc_start = tokens + 3 * cap;
  float* acts = s.acts.f32();
  const float* P = params();
  const int64_t capR = sp_ ? int64_t(cap) / T_ : int64_t(cap);
  auto residual = [&](int l) { return acts + s.residual + int64_t(l) * capR * D; };
  float* dsmall = scratch_.f32() + int64_t(cap) * D;

  if (!is_first()) {
    device_.copy(residual(0), input, size_t(Nr) * size_t(D) * sizeof(float));
  } else if (T_ == 1) {
    device_.embedding_forward(residual(0), tokens, positions, P + registry_.wte_offset(), P + registry_.wpe_offset(),
                              BT, D);
  } else {
    // Vocabulary-parallel: rows of other ranks' tokens are 0 here; rank 0 adds wpe.
    float* emb = sp_ ? dsmall : residual(0);
    device_.embedding_forward_shard(emb, tokens, positions, P + registry_.wte_offset(),
                                    tp_.config().rank() == 0 ? P + registry_.wpe_offset() : nullptr, BT, D,
                                    vocab_begin_, Vpt_);
    if (sp_)
      tp_.reduce_scatter_rows(emb, residual(0), BT, D);
    else
      tp_.all_reduce(emb, BT, D);
  }

  for (int l = 0; l < range().layers(); ++l) {
    const BlockOffsets& o = registry_.block(range().first_layer + l);
    const LayerActs a = layer_acts(s, l);
    float* x = residual(l);
    device_.layernorm_forward(a.ln1 + r0 * D, a.ln1_mean, a.ln1_rstd, x, P + o.ln1_w, P + o.ln1_b, Nr, D, ln_eps_);
    if (sp_) tp_.gather_rows(a.ln1, BT, D);
    if (T_ == 1)
      device_.linear_forward(a.qkv, nullptr, a.ln1, P + o.qkv_w, P + o.qkv_b, nullptr, BT, D, 3 * D);
    else
      qkv_pieces_forward(device_, a.qkv, a.ln1, P + o.qkv_w, P + o.qkv_b, ones_.f32(), BT, D, Dt_);
    device_.attention_forward(a.atty, a.att, a.qkv, doc_start, B, T, Dt_, NHt_);
    row_parallel_forward(a.res2, a.atty, P + o.attn_proj_w, P + o.attn_proj_b, x, BT, Dt_);
    device_.layernorm_forward(a.ln2 + r0 * D, a.ln2_mean, a.ln2_rstd, a.res2, P + o.ln2_w, P + o.ln2_b, Nr, D,
                              ln_eps_);
    if (sp_) tp_.gather_rows(a.ln2, BT, D);
    device_.linear_forward(a.fch, a.fch_gelu, a.ln2, P + o.fc_w, P + o.fc_b, nullptr, BT, D, Ft_);
    row_parallel_forward(residual(l + 1), a.fch_gelu, P + o.fc_proj_w, P + o.fc_proj_b, a.res2, BT, Ft_);
  }

  if (last_) {
    float* lnf = acts + s.lnf;
    device_.layernorm_forward(lnf + r0 * D, acts + s.lnf_mean, acts + s.lnf_rstd, residual(range().layers()),
                              P + registry_.lnf_w_offset(), P + registry_.lnf_b_offset(), Nr, D, ln_eps_);
    if (sp_) tp_.gather_rows(lnf, BT, D);
    float* logits = acts + s.logits;
    if (T_ == 1) {
      // logits[BT, V] (row stride Vp) = lnf[BT, D] * wte[:V]^T
      device_.gemm(false, true, BT, V_, D, 1.0f, lnf, D, P + registry_.wte_offset(), D, 0.0f, logits, Vp_);
      device_.crossentropy_forward(acts + s.losses, acts + s.lse, logits, targets, s.mask.f32(), BT, V_, Vp_);
    } else {
      // This rank's Vt real vocabulary columns only; then (max, sum of exps, target
      // logit) per token from every rank, combined identically everywhere.
      if (Vt_ > 0)
        device_.gemm(false, true, BT, Vt_, D, 1.0f, lnf, D, P + registry_.wte_offset(), D, 0.0f, logits,
                     ld_logits_);
      float* gathered = scratch_.f32() + 2 * int64_t(cap) * D;  // [T, 3, BT] in dbig
      float* mine = gathered + int64_t(tp_.config().rank()) * 3 * BT;
      device_.crossentropy_partials(mine, logits, targets, s.mask.f32(), BT, Vt_, ld_logits_, vocab_begin_);
      tp_.gather_rows(gathered, T_, 3 * int64_t(BT));
      device_.crossentropy_combine(acts + s.losses, acts + s.lse, gathered, T_, s.mask.f32(), BT);
    }
  }
  s.forwarded = true;
  return last_ ? s.loss_tokens : 0;
}

void GptStage::backward(int slot, const float* grad_output, const std::function<void(FlatRange)>& block_done) {
  Slot& s = check_slot(slot, "GptStage::backward");
  if (!s.forwarded) throw std::logic_error("GptStage::backward: slot " + std::to_string(slot) + " holds no forward");
  if (last_ != (grad_output == nullptr))
    throw std::invalid_argument(last_ ? "GptStage::backward: the last stage takes no output gradient"
                                      : "GptStage::backward: a non-last stage needs the output gradient");
  const int B = s.B, T = s.T, BT = B * T, D = D_;
  const int Nr = sp_ ? BT / T_ : BT;
  const int64_t r0 = sp_ ? int64_t(tp_.config().rank()) * Nr : 0;
  const size_t cap = size_t(shape_.micro_batch) * size_t(shape_.seq);
  const int32_t* tokens = s.ints.i32();
  const int32_t* positions = tokens + cap;
  const int32_t* targets = tokens + 2 * cap;
  const int32_t* doc_start = tokens + 3 * cap;
  float* acts = s.acts.f32();
  const float* P = params();
  float* G = grads();
  const int64_t capR = sp_ ? int64_t(cap) / T_ : int64_t(cap);
  auto residual = [&](int l) { return acts + s.residual + int64_t(l) * capR * D; };
  float* dres = scratch_.f32();                // [BT, D] gradient of the residual stream (all rows)
  float* dsmall = dres + int64_t(cap) * D;     // [BT, D]
  float* dbig = dsmall + int64_t(cap) * D;     // [BT, max(3Dt, Ft)]
  float* dres_mine = dres + r0 * D;            // [Nr, D] the rows this rank holds
  // Under sequence parallelism every rank's rows of dres, to every rank.
  auto gather_dres = [&] {
    if (sp_) tp_.gather_rows(dres, BT, D);
  };

  if (last_) {
    float* logits = acts + s.logits;
    const float* lnf = acts + s.lnf;
    const float scale = s.global_loss_tokens > 0 ? 1.0f / float(s.global_loss_tokens) : 0.0f;
    // dlogits (in place) = loss_mask / global_loss_tokens * (softmax - onehot)
    if (T_ == 1) {
      device_.crossentropy_backward(logits, logits, acts + s.lse, targets, s.mask.f32(), scale, BT, V_, Vp_);
      device_.gemm(false, false, BT, D, V_, 1.0f, logits, Vp_, P + registry_.wte_offset(), D, 0.0f, dsmall, D);
      device_.gemm(true, false, V_, D, BT, 1.0f, logits, Vp_, lnf, D, 1.0f, G + registry_.wte_offset(), D);
    } else {
      device_.crossentropy_backward_shard(logits, logits, acts + s.lse, targets, s.mask.f32(), scale, BT, Vt_,
                                          ld_logits_, vocab_begin_);
      if (Vt_ > 0) {
        device_.gemm(false, false, BT, D, Vt_, 1.0f, logits, ld_logits_, P + registry_.wte_offset(), D, 0.0f, dsmall,
                     D);
        device_.gemm(true, false, Vt_, D, BT, 1.0f, logits, ld_logits_, lnf, D, 1.0f, G + registry_.wte_offset(), D);
      } else {
        device_.fill_zero(dsmall, size_t(BT) * size_t(D) * sizeof(float));
      }
    }
    float* dlnf = T_ == 1 ? dsmall : reduce_input_grad(dsmall, BT);
    device_.fill_zero(dres_mine, size_t(Nr) * size_t(D) * sizeof(float));
    device_.layernorm_backward(dres_mine, G + registry_.lnf_w_offset(), G + registry_.lnf_b_offset(), dlnf,
                               residual(range().layers()), P + registry_.lnf_w_offset(), acts + s.lnf_mean,
                               acts + s.lnf_rstd, Nr, D);
  } else {
    device_.copy(dres_mine, grad_output, size_t(Nr) * size_t(D) * sizeof(float));
  }

  for (int l = range().layers() - 1; l >= 0; --l) {
    const BlockOffsets& o = registry_.block(range().first_layer + l);
    const LayerActs a = layer_acts(s, l);
    // MLP half: residual(l+1) = res2 + gelu(fch) * W_proj + b_proj, fch = ln2 * W_fc + b_fc
    gather_dres();
    device_.linear_backward(dbig, G + o.fc_proj_w, G + o.fc_proj_b, dres, a.fch_gelu, P + o.fc_proj_w, a.fch, BT,
                            Ft_, D);
    device_.linear_backward(dsmall, G + o.fc_w, G + o.fc_b, dbig, a.ln2, P + o.fc_w, nullptr, BT, D, Ft_);
    float* dln2 = T_ == 1 ? dsmall : reduce_input_grad(dsmall, BT);
    device_.layernorm_backward(dres_mine, G + o.ln2_w, G + o.ln2_b, dln2, a.res2, P + o.ln2_w, a.ln2_mean,
                               a.ln2_rstd, Nr, D);
    // Attention half: res2 = x + atty * W_aproj + b_aproj, atty = attn(qkv), qkv = ln1 * W_qkv + b_qkv
    gather_dres();
    device_.linear_backward(dsmall, G + o.attn_proj_w, G + o.attn_proj_b, dres, a.atty, P + o.attn_proj_w,
                            nullptr, BT, Dt_, D);
    device_.attention_backward(dbig, dsmall, a.qkv, a.att, doc_start, B, T, Dt_, NHt_);
    if (T_ == 1)
      device_.linear_backward(dsmall, G + o.qkv_w, G + o.qkv_b, dbig, a.ln1, P + o.qkv_w, nullptr, BT, D, 3 * D);
    else
      qkv_pieces_backward(device_, dsmall, G + o.qkv_w, G + o.qkv_b, dbig, a.ln1, P + o.qkv_w, ones_.f32(), BT, D,
                          Dt_);
    float* dln1 = T_ == 1 ? dsmall : reduce_input_grad(dsmall, BT);
    device_.layernorm_backward(dres_mine, G + o.ln1_w, G + o.ln1_b, dln1, residual(l), P + o.ln1_w, a.ln1_mean,
                               a.ln1_rstd, Nr, D);
    if (block_done) block_done({o.ln1_w, o.end});
  }

  if (!is_first()) {
    device_.copy(acts + s.dinput, dres_mine, size_t(Nr) * size_t(D) * sizeof(float));
  } else if (T_ == 1) {
    device_.embedding_backward(G + registry_.wte_offset(), G + registry_.wpe_offset(), dres, tokens, positions, BT, D);
  } else {
    gather_dres();
    device_.embedding_backward_shard(G + registry_.wte_offset(), G + registry_.wpe_offset(), dres, tokens, positions,
                                     BT, D, vocab_begin_, Vpt_);
  }
  s.forwarded = false;
}

const float* GptStage::output(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::output");
  if (last_) throw std::logic_error("GptStage::output: the last stage returns a loss, not activations");
  const int64_t cap = int64_t(shape_.micro_batch) * shape_.seq;
  const int64_t capR = sp_ ? cap / T_ : cap;
  return s.acts.f32() + s.residual + int64_t(range().layers()) * capR * D_;
}

const float* GptStage::input_grad(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::input_grad");
  if (is_first()) throw std::logic_error("GptStage::input_grad: the first stage has no input activations");
  return s.acts.f32() + s.dinput;
}

const float* GptStage::logits(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::logits");
  if (!last_) throw std::logic_error("GptStage::logits: only the last stage computes logits");
  return s.acts.f32() + s.logits;
}

const float* GptStage::token_losses(int slot) const {
  const Slot& s = check_slot(slot, "GptStage::token_losses");
  if (!last_) throw std::logic_error("GptStage::token_losses: only the last stage computes the loss");
  return s.acts.f32() + s.losses;
}

}  // namespace troupe::model
