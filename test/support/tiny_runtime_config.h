// The tiny run the runtime suites (test_runtime, test_recovery, test_cluster, the TP and
// CUDA runtime suites) build on: `layers` layers of width 32 with 2 heads, the byte
// vocabulary (257), 32 positions; data `dp` x pipeline `pp`; a global batch of 8
// sequences of 32 tokens, one per microbatch; lr 1e-3 decaying to 1e-4 after 8 warm-up
// samples; 3 updates (24 samples), seed 7; one compute thread everywhere (identical
// GEMM partitions); TensorBoard off. Each suite sets what it adds on top.
#pragma once

#include "messages/config.pb.h"

namespace troupe::testing {

inline Config tiny_runtime_config(int layers, int dp, int pp) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(layers);
  m->set_heads(2);
  m->set_width(32);
  m->set_vocab_size(257);
  m->set_max_positions(32);
  c.mutable_parallel()->set_data(dp);
  c.mutable_parallel()->set_pipeline(pp);
  auto* b = c.mutable_batch();
  b->set_micro_batch_size(1);
  b->set_global_batch_size(8);
  b->set_seq_length(32);
  c.mutable_optimizer()->set_lr(1e-3);
  c.mutable_optimizer()->set_min_lr(1e-4);
  c.mutable_lr_schedule()->set_warmup_samples(8);
  c.mutable_training()->set_train_samples(24);
  c.mutable_training()->set_seed(7);
  c.mutable_device()->set_threads(1);
  c.mutable_logging()->set_tensorboard(false);
  return c;
}

// The same run with a Llama of the same size: 4 query heads of 8 sharing `kv_heads`
// key/value heads, SwiGLU of 64, rotary positions, RMSNorm, untied head.
inline Config as_llama(Config c, int kv_heads = 2) {
  auto* m = c.mutable_model();
  m->set_architecture(ModelConfig::LLAMA);
  m->set_heads(4);
  m->set_kv_heads(kv_heads);
  m->set_ffn_width(64);
  m->set_tied_embeddings(false);
  return c;
}

}  // namespace troupe::testing
