// Text generation on the CPU: the whole model (either family) over host weights laid
// out by a whole-model ParameterRegistry, one token at a time with a KV cache
// (`supervisor generate`). The arithmetic follows the training forward (model/layers)
// in the same order of operations, with every dot product and norm accumulated in
// double: it is a reference for reading a model's output, not a fast path.
//
// GPT-2: x = wte[t] + wpe[p]; per block x += c_proj(attn(ln_1 x)), x += mlp(ln_2 x)
// with the tanh GELU; logits = ln_f(x) wte^T (or lm_head). Llama: x = embed[t]; per
// block x += o_proj(gqa(rope(q), rope(k), v)) over input_layernorm x, x += down(silu(
// gate) * up) over post_attention_layernorm x; logits = norm(x) lm_head^T (or the
// embedding, tied). Rotary pairs are (i, i + hs/2), Hugging Face's rotate_half.
//
// Sampling (next_token) is deterministic for a seed: the draw of step s is the
// first output of Philox4x32-10 at counter (s, 0, 0, 0) with the seed as key, mapped
// to [0, 1); temperature 0 is greedy (the lowest id among equal maxima).
#pragma once

#include <cstdint>
#include <vector>

#include "messages/config.pb.h"
#include "model/param_registry.h"

namespace troupe::model {

// What generation steps: feed the next token, get the logits after it.
class TokenStepper {
 public:
  virtual ~TokenStepper() = default;
  // Feeds `token` at the next position; returns the vocab_size logits after it.
  virtual std::vector<float> step(int32_t token) = 0;
  virtual int position() const = 0;
};

class Decoder final : public TokenStepper {
 public:
  // `params`: reg.total() floats of a registry of the whole model of `spec` (tp 1).
  Decoder(const ModelSpec& spec, std::vector<float> params);

  // Feeds token `token` at the next position; returns the vocab_size logits after it.
  // Throws std::invalid_argument past model.max_positions or for an id outside the
  // vocabulary.
  std::vector<float> step(int32_t token) override;
  int position() const override { return position_; }
  void reset() { position_ = 0; }

 private:
  void attention(int layer, const std::vector<double>& q, std::vector<double>& out);

  ModelSpec spec_;
  ParameterRegistry reg_;
  std::vector<float> p_;
  bool llama_;
  int D_, NH_, KV_, hs_, F_, V_, P_;
  double eps_;
  std::vector<double> freq_;  // Llama: rotary frequencies f_i, i < hs/2
  // [layer][position][KV * hs]
  std::vector<std::vector<float>> k_cache_, v_cache_;
  int position_ = 0;
};

struct SamplingOptions {
  double temperature = 0;  // 0: greedy
  int top_k = 0;           // 0: the whole vocabulary
  uint64_t seed = 0;
};

// The next token from `logits` (draw number `step` of the seed's stream).
int32_t next_token(const std::vector<float>& logits, const SamplingOptions& o, int64_t step);

// Feeds `prompt` (not empty) to a fresh stepper (position 0) and continues it: up to
// `max_tokens` tokens, ending after one of `stop_ids` (unless `ignore_stop`) or at
// model.max_positions of `spec`. Returns the generated IDs (a stop ID included).
std::vector<int32_t> continue_prompt(TokenStepper& stepper, const ModelSpec& spec, const std::vector<int32_t>& prompt,
                                     int max_tokens, const SamplingOptions& o, const std::vector<int32_t>& stop_ids,
                                     bool ignore_stop = false);
// The same on a Decoder (the CPU) of `params`.
std::vector<int32_t> continue_prompt(const ModelSpec& spec, std::vector<float> params,
                                     const std::vector<int32_t>& prompt, int max_tokens, const SamplingOptions& o,
                                     const std::vector<int32_t>& stop_ids, bool ignore_stop = false);

}  // namespace troupe::model
