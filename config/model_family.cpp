#include "config/model_family.h"

#include <stdexcept>
#include <string>

namespace troupe::config {
namespace {

constexpr ModelFamily kFamilies[] = {
    {ModelConfig::GPT2, "GPT2", "learned positions, LayerNorm, GELU", /*learned_positions=*/true,
     /*rms_norm=*/false, /*swiglu=*/false, /*biases=*/true, /*grouped_query=*/false, "gpt2", "GPT2LMHeadModel"},
    {ModelConfig::LLAMA, "LLAMA", "rotary positions, RMSNorm, grouped-query attention, SwiGLU",
     /*learned_positions=*/false, /*rms_norm=*/true, /*swiglu=*/true, /*biases=*/false, /*grouped_query=*/true,
     "llama", "LlamaForCausalLM"},
};

}  // namespace

const ModelFamily& model_family(ModelConfig::Architecture a) {
  for (const auto& f : kFamilies)
    if (f.architecture == a) return f;
  throw std::invalid_argument("model.architecture " + std::to_string(int(a)) + ": no such model family");
}

const ModelFamily& model_family(const ModelConfig& m) { return model_family(m.architecture()); }

}  // namespace troupe::config
