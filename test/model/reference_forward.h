// Test helper: a plain double-precision forward of each model family written from
// the spec (naive loops, no kernels, no BLAS): GPT-2 (reference_forward.cpp) and
// Llama (llama_reference.cpp), for finite-difference checks of the fp32 model's
// gradients and for comparing its loss and activations.
#pragma once

#include <vector>

#include "data/batch.h"
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

}  // namespace troupe::testing
