#include "config/derived.h"

#include "config/model_family.h"

namespace troupe::config {

int64_t ffn_width(const ModelConfig& m) {
  return m.ffn_width() > 0 ? m.ffn_width() : 4 * int64_t(m.width());
}

int64_t kv_heads(const ModelConfig& m) { return m.kv_heads() > 0 ? m.kv_heads() : m.heads(); }

int64_t head_size(const ModelConfig& m) { return m.head_dim() > 0 ? m.head_dim() : m.width() / m.heads(); }

int64_t attention_width(const ModelConfig& m) { return m.heads() * head_size(m); }

float norm_eps(const ModelConfig& m) { return m.has_norm_eps() ? m.norm_eps() : m.layernorm_eps(); }

int64_t padded_vocab(const Config& c) {
  const int64_t multiple = int64_t(c.model().vocab_pad_multiple()) * c.parallel().tensor();
  const int64_t v = c.model().vocab_size();
  return (v + multiple - 1) / multiple * multiple;
}

int64_t parameter_count(const Config& c) {
  const auto& m = c.model();
  const int64_t w = m.width(), f = ffn_width(m), embedding = padded_vocab(c) * w;
  const int64_t head = m.tied_embeddings() ? 0 : embedding;
  const ModelFamily& family = model_family(m);
  const int64_t q_width = attention_width(m), kv_width = kv_heads(m) * head_size(m);
  const int64_t norm = family.rms_norm ? w : 2 * w;  // a norm's weight (and bias)
  // q, k, v, o, with their biases; the MLP's two (GELU) or three (SwiGLU) matrices and
  // their biases; two norms a layer, one at the end.
  const int64_t attention = 2 * w * q_width + 2 * w * kv_width + (family.biases ? q_width + 2 * kv_width + w : 0);
  const int64_t mlp = (family.swiglu ? 3 : 2) * w * f + (family.biases ? f + w : 0);
  const int64_t per_layer = attention + mlp + 2 * norm;
  const int64_t positions = family.learned_positions ? int64_t(m.max_positions()) * w : 0;
  return embedding + head + positions + m.layers() * per_layer + norm;
}

int64_t microbatches_per_replica(const Config& c) {
  return c.batch().global_batch_size() /
         (int64_t(c.batch().micro_batch_size()) * c.parallel().data());
}

int64_t eval_microbatches_per_replica(const Config& c) {
  return c.training().eval_samples() /
         (int64_t(c.batch().micro_batch_size()) * c.parallel().data());
}

int64_t tokens_per_update(const Config& c) {
  return int64_t(c.batch().global_batch_size()) * c.batch().seq_length();
}

int64_t full_updates(const Config& c) {
  return c.training().train_samples() / c.batch().global_batch_size();
}

int64_t decay_samples(const Config& c) {
  return c.lr_schedule().decay_samples() > 0 ? c.lr_schedule().decay_samples()
                                             : c.training().train_samples();
}

int32_t physical_replicas(const Config& c) {
  return c.parallel().physical_replicas() > 0 ? c.parallel().physical_replicas() : c.parallel().data();
}

std::string placement_text(const Config& c) {
  const int32_t logical = c.parallel().data(), physical = physical_replicas(c);
  if (physical == logical) return "one physical replica per logical one";
  std::string turns;
  for (int32_t d = 0; d < logical; d += physical) turns += (d == 0 ? "q" : ", q + " + std::to_string(d));
  return std::to_string(logical) + " logical replicas on " + std::to_string(physical) + " physical one" +
         (physical == 1 ? "" : "s") + ": physical q computes " + turns + " in turn";
}

}  // namespace troupe::config
