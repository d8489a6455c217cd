// The parameter registry: every tensor a model object holds, as (name, shape,
// offset, decay group) over ONE contiguous fp32 buffer. Gradients live in a second
// buffer with the same layout, and so do the optimizer's m and v.
//
// Names and layouts are Hugging Face's for the family (model.architecture), so
// export and inspection copy tensors directly. GPT2 (Conv1D weights [in, out]):
//   wte.weight                 [padded_vocab, D]  rows >= vocab_size are padding: zero,
//                                                 never predicted, sliced off on export
//   wpe.weight                 [max_positions, D]
//   h.{i}.ln_1.weight/.bias    [D]
//   h.{i}.attn.c_attn.weight   [D, 3D]  Conv1D: [in, out]; out columns are q | k | v,
//   h.{i}.attn.c_attn.bias     [3D]     head h at columns [h*hs, (h+1)*hs) of each
//   h.{i}.attn.c_proj.weight   [D, D],  .bias [D]
//   h.{i}.ln_2.weight/.bias    [D]
//   h.{i}.mlp.c_fc.weight      [D, F],  .bias [F]
//   h.{i}.mlp.c_proj.weight    [F, D],  .bias [D]
//   ln_f.weight/.bias          [D]
// LLAMA (nn.Linear weights [out, in]; no biases; hs the head size, model.head_dim or
// D / heads; A = heads * hs, D unless head_dim says otherwise; KVs = kv_heads * hs):
//   model.embed_tokens.weight                 [padded_vocab, D]
//   model.layers.{i}.input_layernorm.weight   [D]
//   model.layers.{i}.self_attn.q_proj.weight  [A, D]    head h at rows [h*hs, (h+1)*hs)
//   model.layers.{i}.self_attn.k_proj.weight  [KVs, D]
//   model.layers.{i}.self_attn.v_proj.weight  [KVs, D]
//   model.layers.{i}.self_attn.o_proj.weight  [D, A]
//   model.layers.{i}.post_attention_layernorm.weight [D]
//   model.layers.{i}.mlp.gate_proj.weight     [F, D],  up_proj [F, D],  down_proj [D, F]
//   model.norm.weight                         [D]
//   lm_head.weight                            [padded_vocab, D]  (untied head only)
// An untied GPT-2 head is lm_head.weight too.
// Layout in the flat buffer: the token (and GPT-2's position) embedding (first
// stage); blocks in order, each in the order above; the final norm (last stage);
// then the head: lm_head.weight when untied, or, tied on a last stage that is not
// also the first, its own copy of the token embedding.
//
// Tied embeddings across pipeline stages: the first and the last stage each hold a
// tensor named embedding_name() (wte.weight, model.embed_tokens.weight). After the
// last backward of a step the runtime must make both gradients the sum of the two,
// then both stages apply the same update. The last stage's copy has counts_in_norm =
// false so the global norm counts the embedding once.
//
// Decay groups (docs/numerics.md, "AdamW"): 2-D weights decay (wte, wpe, the four matrices
// of each block); biases and 1-D parameters (LayerNorm weights and biases) do not.
//
// Slices: each entry records the global shape of the tensor and the slice this
// object holds (start and extent per dimension, a box), stored row-major at
// `offset`. Without tensor parallelism every entry is a whole tensor.
//
// Tensor parallelism (Megatron-LM's split; rank t of T, Dt = D/T, Ft = F/T, Vpt = Vp/T):
//   wte.weight            rows [t*Vpt, (t+1)*Vpt)                   vocabulary-parallel
//   h.{i}.attn.c_attn.*   heads [t*NH/T, (t+1)*NH/T) of q, k and v: column-parallel,
//                         held as THREE entries of the same name (q, k, v pieces:
//                         columns [j*D + t*Dt, j*D + (t+1)*Dt) for j = 0, 1, 2), each
//                         [D, Dt] (weight) or [Dt] (bias), in that order; so the three
//                         bias pieces form one [3Dt] vector q_t | k_t | v_t
//   h.{i}.attn.c_proj.weight  rows [t*Dt, (t+1)*Dt)                  row-parallel
//   h.{i}.mlp.c_fc.*      columns [t*Ft, (t+1)*Ft)                   column-parallel
//   h.{i}.mlp.c_proj.weight   rows [t*Ft, (t+1)*Ft)                  row-parallel
//   replicated (whole on every rank): wpe, ln_1, ln_2, ln_f, attn.c_proj.bias,
//   mlp.c_proj.bias.
// LLAMA splits the same way: embed_tokens and lm_head by vocabulary rows; q_proj,
// gate_proj, up_proj by rows (out: q_proj's [t*A/T, (t+1)*A/T), whole heads); o_proj
// and down_proj by columns (in); k_proj and
// v_proj by rows of kv heads when kv_heads divides by T, else replicated (each rank
// uses the kv head of its query heads, and the group sums their gradients: the
// attention layer reports them as partial); the norms replicated. Their copies on ranks t > 0 have counts_in_norm = false, so the
//   global norm counts each once; the runtime keeps them identical across ranks.
// at(name) returns the first entry of a name (the q piece of c_attn).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/config.pb.h"
#include "model/model_spec.h"
#include "model/stage_range.h"

namespace troupe::model {

enum class DecayGroup { kDecay, kNoDecay };
const char* decay_group_name(DecayGroup g);

// How a tensor starts (model.init_std rules, GPT-2's): normal(0, std) for weights,
// std / sqrt(2 * layers) for the two residual projections, 0 for biases, 1 for norm scales.
enum class InitKind { kNormal, kZeros, kOnes };

struct ParamTensor {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> slice_start;  // per dim, into global_shape
  std::vector<int64_t> shape;        // extent per dim held here (row-major in the buffer)
  int64_t offset = 0;                // first element in the flat buffers
  int64_t numel = 0;
  DecayGroup group = DecayGroup::kDecay;
  bool counts_in_norm = true;        // false for a tied copy and for replicas on tp > 0
  bool replicated = false;           // whole on every tensor-parallel rank (T > 1 only)
  InitKind init = InitKind::kZeros;
  float init_std = 0;
  // Rows of the GLOBAL dim 0 that hold real values; later rows are padding kept at
  // zero (wte: vocab_size of padded_vocab). global_shape[0] for every other tensor.
  int64_t valid_rows = 0;
};

// Which tensor-parallel slice a model object holds: rank `rank` of `size` (1: whole).
struct TensorSlice {
  int rank = 0;
  int size = 1;
};

// A contiguous range of the flat buffers, [begin, end).
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// A range whose elements share one decay group (adjacent tensors merged).
struct DecaySpan {
  int64_t begin = 0;
  int64_t end = 0;
  DecayGroup group = DecayGroup::kDecay;
};

// Offsets of one transformer block's tensors in the flat buffer; the block's tensors
// fill [begin, end). -1: the family has no such tensor. GPT2 uses the first row;
// LLAMA: ln1_w input_layernorm, q_w/k_w/v_w, attn_proj_w o_proj, ln2_w
// post_attention_layernorm, fc_w gate_proj, fc_up_w up_proj, fc_proj_w down_proj.
struct BlockOffsets {
  int64_t ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, attn_proj_w = -1, attn_proj_b = -1;
  int64_t ln2_w = -1, ln2_b = -1, fc_w = -1, fc_b = -1, fc_proj_w = -1, fc_proj_b = -1;
  int64_t q_w = -1, k_w = -1, v_w = -1, fc_up_w = -1;
  int64_t begin = 0, end = 0;
};

class ParameterRegistry {
 public:
  // Throws std::invalid_argument when heads, ffn width or padded vocab do not split
  // evenly over slice.size.
  ParameterRegistry(const ModelSpec& spec, StageRange range, TensorSlice slice = {});
  // A stage of several model chunks (the interleaved schedule): the embedding when
  // chunk 0 starts at layer 0, every chunk's blocks in chunk order, the final norm and
  // head when the last chunk ends at the last layer.
  ParameterRegistry(const ModelSpec& spec, StageLayers layers, TensorSlice slice = {});

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // The tensor called `name`; throws std::out_of_range naming it and the stage.
  const ParamTensor& at(std::string_view name) const;
  const ParamTensor* find(std::string_view name) const;
  int64_t total() const { return total_; }
  // The layers held, by model chunk; range(): the one range of a single-chunk stage
  // (std::logic_error with several chunks).
  const StageLayers& layers() const { return range_; }
  StageRange range() const;
  TensorSlice slice() const { return slice_; }
  // Vocabulary rows of wte held here: [vocab_begin(), vocab_begin() + vocab_rows()).
  int64_t vocab_begin() const { return vocab_begin_; }
  int64_t vocab_rows() const { return vocab_rows_; }

  // Names per decay group, in layout order (the startup log prints both lists).
  std::vector<std::string> names(DecayGroup g) const;
  std::vector<DecaySpan> decay_spans() const;
  // Ranges whose squares make up this object's share of the global gradient norm.
  std::vector<FlatRange> norm_ranges() const;

  // Offsets of block `layer` (a global layer index held here).
  const BlockOffsets& block(int layer) const;
  // The token embedding's tensor (wte / embed_tokens; -1 when not held), GPT-2's
  // positions (-1 when not held or LLAMA), the final norm's scale and shift (-1: RMSNorm).
  int64_t wte_offset() const { return wte_; }
  int64_t wpe_offset() const { return wpe_; }
  int64_t lnf_w_offset() const { return lnf_w_; }
  int64_t lnf_b_offset() const { return lnf_b_; }
  // The head's weight: the token embedding (tied) or lm_head.weight (last stage; -1 elsewhere).
  int64_t head_offset() const { return head_; }
  bool tied() const { return tied_; }
  // Name of the token embedding, which a tied head shares across the pipeline.
  const std::string& embedding_name() const { return embedding_name_; }

 private:
  void add_gpt2(const ModelSpec& spec);
  void add_llama(const ModelSpec& spec);
  // A vocabulary-parallel [padded_vocab, D] table: this rank's rows [vocab_begin,
  // vocab_begin + vocab_rows), padding rows past vocab_size (the token embedding, an
  // untied head). Returns its offset.
  int64_t add_vocab_table(const ModelSpec& spec, const std::string& name);
  // The head on the last stage: lm_head.weight (untied) or, tied, the token embedding
  // (its own copy when the stage is not also the first).
  void add_head(const ModelSpec& spec);
  // A whole tensor (replicated across tensor-parallel ranks when T > 1).
  int64_t add(std::string name, std::vector<int64_t> shape, DecayGroup g, InitKind init,
              float std);
  // The box [start, start + shape) of a tensor of global_shape.
  int64_t add_slice(std::string name, std::vector<int64_t> global_shape, std::vector<int64_t> start,
                    std::vector<int64_t> shape, DecayGroup g, InitKind init, float std,
                    int64_t valid_rows = -1);

  StageLayers range_;
  TensorSlice slice_;
  int64_t vocab_begin_ = 0, vocab_rows_ = 0;
  std::vector<ParamTensor> tensors_;
  std::vector<BlockOffsets> blocks_;
  int64_t total_ = 0;
  int64_t wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, head_ = -1;
  bool tied_ = true;
  std::string embedding_name_;
};

}  // namespace troupe::model
