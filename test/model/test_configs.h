// Test helper: small configs and the microbatches the model tests share.
#pragma once

#include <random>
#include <vector>

#include "data/batch.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/gpt_stage.h"
#include "test/model/batch_builder.h"

namespace troupe::testing {

// 2 layers, 2 heads, width 16, byte vocabulary (257, padded to 320), 16 positions per sample.
inline Config tiny_config() {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(2);
  m->set_heads(2);
  m->set_width(16);
  m->set_vocab_size(257);
  m->set_max_positions(32);
  c.mutable_batch()->set_micro_batch_size(2);
  c.mutable_batch()->set_global_batch_size(4);
  c.mutable_batch()->set_seq_length(16);
  c.mutable_training()->set_seed(7);
  c.mutable_training()->set_train_samples(64);
  return c;
}

// tiny_config as a Llama: 4 query heads sharing 2 kv heads (head size 4), SwiGLU of
// 24, rotary positions, untied head. tied: the head shares embed_tokens instead.
inline Config tiny_llama_config(int kv_heads = 2, bool tied = false) {
  Config c = tiny_config();
  auto* m = c.mutable_model();
  m->set_architecture(ModelConfig::LLAMA);
  m->set_heads(4);
  m->set_kv_heads(kv_heads);
  m->set_ffn_width(24);
  m->set_tied_embeddings(tied);
  m->set_rope_theta(500.0);  // small, so that 16 positions turn even the slowest pair visibly
  return c;
}

// tiny_llama_config with heads of `head_dim` (model.head_dim) instead of width / heads:
// q_proj [4 head_dim, 16], k_proj and v_proj [kv_heads head_dim, 16], o_proj
// [16, 4 head_dim].
inline Config tiny_llama_head_dim_config(int head_dim, int kv_heads = 2, bool tied = false) {
  Config c = tiny_llama_config(kv_heads, tied);
  c.mutable_model()->set_head_dim(head_dim);
  return c;
}

// Two microbatches of two rows with every case of docs/numerics.md, "Packed windows":
// two short documents packed in one window, documents cut by the window end, and
// padding.
inline std::vector<data::Microbatch> packed_batches(int T = 16) {
  std::vector<data::Microbatch> mbs = {
      pack_rows({Row{{doc_tokens(4, 1), doc_tokens(5, 2)}}, Row{{doc_tokens(40, 3)}}}, T),
      pack_rows({Row{{doc_tokens(2, 4), doc_tokens(30, 5)}}, Row{{doc_tokens(6, 6)}, 65}}, T)};
  set_global_tokens(mbs);
  return mbs;
}

// Perturbs every parameter by noise * N(0, 1) (biases and norm scales included, so
// that no gradient is trivially structured), keeping vocabulary padding rows at zero.
inline void jitter_parameters(model::GptStage& stage, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> host(size_t(stage.param_count()));
  stage.device().copy_to_host(host.data(), stage.params(), host.size() * sizeof(float));
  for (const auto& t : stage.registry().tensors()) {
    const int64_t row_len = t.shape.size() == 2 ? t.shape[1] : 1;
    for (int64_t i = 0; i < t.numel; ++i) {
      if (t.shape.size() == 2 && i / row_len >= t.valid_rows) continue;
      host[size_t(t.offset + i)] += float(noise * nd(rng));
    }
  }
  stage.device().copy_from_host(stage.params(), host.data(), host.size() * sizeof(float));
}

// Zeroes the gradients, then forward and backward of each microbatch in slot 0, in
// order; returns the sum of their loss sums.
inline double accumulate_gradients(model::GptStage& stage, const std::vector<data::Microbatch>& mbs) {
  stage.zero_grads();
  double loss_sum = 0;
  for (const auto& mb : mbs) {
    loss_sum += stage.forward(0, mb).loss_sum;
    stage.backward(0);
  }
  return loss_sum;
}

inline std::vector<float> to_host(kernels::Device& dev, const float* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dev.copy_to_host(out.data(), p, out.size() * sizeof(float));
  return out;
}

}  // namespace troupe::testing
