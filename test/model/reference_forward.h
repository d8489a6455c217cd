// Test helper: a plain double-precision forward of each model family written from
// the spec (naive loops, no kernels, no BLAS): GPT-2 (reference_forward.cpp) and
// Llama (llama_reference.cpp), for finite-difference checks of the fp32 model's
// gradients and for comparing its loss and activations.
#pragma once

#include <vector>

#include "data/batch.h"
#include "kernels/dropout.h"
#include "messages/config.pb.h"
#include "model/param_registry.h"

namespace troupe::testing {

struct ReferenceOutput {
  double loss_sum = 0;               // sum of masked per-token losses
  std::vector<double> output;        // stage output [B*T, D] (non-last stage)
  std::vector<double> token_losses;  // [B*T] (last stage)
  std::vector<double> logits;        // [B*T, V] (last stage)
};

// Runs the stage described by `reg` on one microbatch. `params` follows reg's flat
// layout; `input` ([B*T, D]) is used by non-first stages.
ReferenceOutput reference_forward(const Config& c, const model::ParameterRegistry& reg,
                                  const std::vector<double>& params, const data::Microbatch& mb,
                                  const std::vector<double>* input = nullptr);

// The Llama family's (reference_forward calls it for model.architecture LLAMA).
ReferenceOutput llama_reference_forward(const Config& c, const model::ParameterRegistry& reg,
                                        const std::vector<double>& params, const data::Microbatch& mb,
                                        const std::vector<double>* input = nullptr);

// Sum over microbatches of the masked loss sums, divided by global_loss_tokens.
double reference_loss(const Config& c, const model::ParameterRegistry& reg,
                      const std::vector<double>& params, const std::vector<data::Microbatch>& mbs,
                      const std::vector<std::vector<double>>* inputs = nullptr);

// d reference_loss / d params[idx] by central differences of step h (params is
// restored before returning).
double central_difference(const Config& c, const model::ParameterRegistry& reg, std::vector<double>& params,
                          const std::vector<data::Microbatch>& mbs, size_t idx, double h);

// Dropout as the spec places it (docs/compute.md, "Dropout"), element by element with
// kernels::dropout_keep: the factor (1 / (1 - p) or 0) of hidden site `site` of layer
// `layer` at row n of mb and column col, and multiplies x[N, D] by it in place. 1 when
// the config has no hidden dropout or mb is not a training microbatch.
double hidden_dropout_factor(const Config& c, const data::Microbatch& mb, int layer, kernels::DropoutSite site, int n,
                             int col);
void reference_hidden_dropout(std::vector<double>& x, const Config& c, const data::Microbatch& mb, int layer,
                              kernels::DropoutSite site, int D);

// Causal attention within each token's document (mb.segments), in double: query head
// h of q (rows of q_stride) reads kv head h / (NH / KV) of k and v (rows of
// kv_stride); y[N, NH hs] the heads concatenated. With `c` and `layer`, the
// probabilities are dropped by the config's attention_dropout (training microbatches).
void reference_attention(std::vector<double>& y, const double* q, int64_t q_stride, const double* k,
                         const double* v, int64_t kv_stride, const data::Microbatch& mb, int NH, int KV, int hs,
                         const Config* c = nullptr, int layer = 0);

// The last stage's head and loss from the final norm's output x[N, D]: logits[N, V] =
// x head[0:V]^T, per-token masked cross-entropy, and their sum (into out).
void reference_head_loss(ReferenceOutput& out, const std::vector<double>& x, const double* head,
                         const data::Microbatch& mb, int N, int D, int V);

}  // namespace troupe::testing
