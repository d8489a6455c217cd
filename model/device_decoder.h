// Generation on any kernels::Device (`supervisor generate --device cuda`): the training
// stage's forward (model/gpt_stage.h, so the device's own kernels: bf16 GEMM operands
// on the CUDA device, docs/gpu.md) over the whole sequence so far at every step, the
// last position's logits read back. No KV cache: causal attention makes the logits
// at position p depend on tokens 0..p only, so recomputing the prefix gives the same
// logits a cache would, at O(n^2) work, which is plenty for looking at a model.
// Evaluation mode: the microbatch is no training microbatch, so no dropout.
#pragma once

#include <memory>
#include <vector>

#include "data/batch.h"
#include "kernels/device.h"
#include "messages/config.pb.h"
#include "model/decoder.h"

namespace troupe::model {

class GptStage;

class DeviceDecoder final : public TokenStepper {
 public:
  // `params`: reg.total() floats of a whole-model registry of `c` (tp 1, pp 1), copied
  // onto `device`; `capacity`: the most positions it will be fed (<= max_positions).
  DeviceDecoder(const ModelSpec& spec, const std::vector<float>& params, kernels::Device& device, int capacity);
  ~DeviceDecoder() override;

  // Throws std::invalid_argument past `capacity` or for an id outside the vocabulary.
  std::vector<float> step(int32_t token) override;
  int position() const override { return int(mb_.tokens.size()); }

 private:
  ModelSpec spec_;
  kernels::Device& device_;
  int capacity_;
  std::unique_ptr<GptStage> stage_;
  data::Microbatch mb_;
};

}  // namespace troupe::model
