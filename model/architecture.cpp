#include "model/architecture.h"

#include <algorithm>

#include "config/derived.h"

namespace troupe::model {

namespace {

layers::Weight at(int64_t offset, float* params, float* grads) {
  if (offset < 0) return {};
  return {params + offset, grads + offset};
}

}  // namespace

Architecture architecture(const ModelSpec& spec, const ParameterRegistry& registry) {
  const auto& m = spec.model;
  const int T = registry.slice().size;
  const int D = m.width();
  layers::VocabShard vocab;
  vocab.begin = int(registry.vocab_begin());
  vocab.rows = int(spec.padded_vocab) / T;
  vocab.valid = std::clamp(m.vocab_size() - vocab.begin, 0, vocab.rows);

  Architecture a;
  a.head = {D, vocab};
  a.loss = {vocab};
  a.seed = spec.seed;
  // Dropout probabilities; block_config adds each layer's keys.
  const layers::DropoutConfig embedding_dropout{
      m.hidden_dropout(), kernels::dropout_key(a.seed, 0, kernels::DropoutSite::kEmbedding)};
  a.block.attention.probs_dropout.p = m.attention_dropout();
  a.block.attention.output_dropout.p = m.hidden_dropout();
  a.block.mlp.output_dropout.p = m.hidden_dropout();
  const bool selective = m.recompute() == ModelConfig::SELECTIVE;
  a.block.attention.selective_recompute = selective;
  a.block.mlp.selective_recompute = selective;
  if (m.architecture() == ModelConfig::LLAMA) {  // the layer kinds of each family (config/model_family.h)
    const auto& r = m.rope_scaling();
    const int hs = int(config::head_size(m));
    a.rope = layers::RopeConfig{hs,
                                m.max_positions(),
                                m.rope_theta(),
                                m.has_rope_scaling() ? r.factor() : 0.0,
                                r.low_freq_factor(),
                                r.high_freq_factor(),
                                r.original_max_positions()};
    a.embedding = {D, layers::Positions::kNone, vocab, embedding_dropout};
    const layers::NormConfig norm{layers::NormKind::kRmsNorm, D, config::norm_eps(m)};
    a.block.norm = norm;
    a.block.attention.kind = layers::AttentionKind::kGroupedQuery;
    a.block.attention.width = D;
    a.block.attention.heads = m.heads();
    a.block.attention.kv_heads = int(config::kv_heads(m));
    a.block.attention.head_size = hs;
    a.block.mlp.kind = layers::MlpKind::kSwiGlu;
    a.block.mlp.width = D;
    a.block.mlp.ffn_width = int(config::ffn_width(m));
    a.final_norm = norm;
    return a;
  }
  a.embedding = {D, layers::Positions::kLearned, vocab, embedding_dropout};
  const layers::NormConfig norm{layers::NormKind::kLayerNorm, D, config::norm_eps(m)};
  a.block.norm = norm;
  a.block.attention.kind = layers::AttentionKind::kMultiHead;
  a.block.attention.width = D;
  a.block.attention.heads = m.heads();
  a.block.attention.kv_heads = m.heads();
  a.block.mlp.kind = layers::MlpKind::kGelu;
  a.block.mlp.width = D;
  a.block.mlp.ffn_width = int(config::ffn_width(m));
  a.final_norm = norm;
  return a;
}

BlockConfig block_config(const Architecture& a, int layer) {
  using kernels::DropoutSite;
  BlockConfig b = a.block;
  b.attention.probs_dropout.key = kernels::dropout_key(a.seed, layer, DropoutSite::kAttentionProbs);
  b.attention.output_dropout.key = kernels::dropout_key(a.seed, layer, DropoutSite::kAttentionOutput);
  b.mlp.output_dropout.key = kernels::dropout_key(a.seed, layer, DropoutSite::kMlpOutput);
  return b;
}

layers::EmbeddingWeights embedding_weights(const ParameterRegistry& r, float* params, float* grads) {
  return {at(r.wte_offset(), params, grads), at(r.wpe_offset(), params, grads)};
}

BlockWeights block_weights(const ParameterRegistry& r, int layer, float* params, float* grads) {
  const BlockOffsets& o = r.block(layer);
  auto w = [&](int64_t offset) { return at(offset, params, grads); };
  BlockWeights b;
  b.norm_1 = {w(o.ln1_w), w(o.ln1_b)};
  b.attention = {w(o.qkv_w), w(o.qkv_b), w(o.attn_proj_w), w(o.attn_proj_b), w(o.q_w), w(o.k_w), w(o.v_w)};
  b.norm_2 = {w(o.ln2_w), w(o.ln2_b)};
  b.mlp = {w(o.fc_w), w(o.fc_b), w(o.fc_proj_w), w(o.fc_proj_b), w(o.fc_up_w)};
  return b;
}

layers::NormWeights final_norm_weights(const ParameterRegistry& r, float* params, float* grads) {
  return {at(r.lnf_w_offset(), params, grads), at(r.lnf_b_offset(), params, grads)};
}

layers::Weight head_weight(const ParameterRegistry& r, float* params, float* grads) {
  return at(r.head_offset(), params, grads);
}

}  // namespace troupe::model
