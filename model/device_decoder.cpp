#include "model/device_decoder.h"

#include <stdexcept>
#include <string>

#include "config/derived.h"
#include "model/gpt_stage.h"

namespace troupe::model {

DeviceDecoder::DeviceDecoder(const ModelSpec& spec, const std::vector<float>& params, kernels::Device& device,
                             int capacity)
    : spec_(spec), device_(device), capacity_(capacity) {
  if (capacity < 1 || capacity > spec.model.max_positions())
    throw std::invalid_argument("DeviceDecoder: capacity " + std::to_string(capacity) + " outside [1, max_positions " +
                                std::to_string(spec.model.max_positions()) + "]");
  stage_ = std::make_unique<GptStage>(spec_, StageRange{0, spec.model.layers()}, device_, 1, StageShape{1, capacity});
  if (int64_t(params.size()) != stage_->param_count())
    throw std::invalid_argument("DeviceDecoder: " + std::to_string(params.size()) + " parameters for a model of " +
                                std::to_string(stage_->param_count()));
  device_.copy_from_host(stage_->params(), params.data(), params.size() * sizeof(float));
  mb_.batch = 1;
}

DeviceDecoder::~DeviceDecoder() = default;

std::vector<float> DeviceDecoder::step(int32_t token) {
  const int64_t vocab = spec_.model.vocab_size();
  if (token < 0 || token >= vocab)
    throw std::invalid_argument("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                std::to_string(vocab) + ")");
  if (position() >= capacity_)
    throw std::invalid_argument("position " + std::to_string(position()) + " is past the decoder's capacity " +
                                std::to_string(capacity_));
  // One row of the whole sequence so far, one document: every position attends to all
  // before it. Targets are unused (the loss is computed and ignored).
  const int t = position();
  mb_.tokens.push_back(token);
  mb_.targets.push_back(0);
  mb_.positions.push_back(t);
  mb_.segments.push_back(0);
  mb_.loss_mask.push_back(1.0f);
  mb_.seq = t + 1;
  mb_.loss_tokens = mb_.global_loss_tokens = t + 1;
  stage_->forward(0, mb_);
  std::vector<float> logits(static_cast<size_t>(vocab));
  device_.copy_to_host(logits.data(), stage_->logits(0) + int64_t(t) * spec_.padded_vocab,
                       logits.size() * sizeof(float));
  return logits;
}

}  // namespace troupe::model
