// A plain GPT-2 forward in double precision, written for the export test: the
// logits transformers must reproduce from an exported model. Independent of
// model/ on purpose (it checks the layout conventions, not our kernels).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace troupe::ckpt::testing {

struct Gpt2Dims {
  int layers, heads, width, ffn, vocab;
  double eps;
};

// `weight(name)` returns the tensor in Hugging Face layout (Conv1D [in, out];
// wte with at least `vocab` rows). Returns logits [tokens.size(), vocab], row-major.
// GELU is GPT-2's tanh approximation ("gelu_new").
std::vector<double> gpt2_reference_logits(
    const Gpt2Dims& dims, const std::function<const std::vector<float>&(const std::string&)>& weight,
    const std::vector<int>& tokens);

}  // namespace troupe::ckpt::testing
