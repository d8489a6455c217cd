// Named tensors in and out of a flat buffer, under Hugging Face GPT-2 names and
// shapes: what `supervisor inspect-update` writes and what --init reads.
#pragma once

#include <string>
#include <vector>

#include "model/param_registry.h"
#include "model/safetensors.h"

namespace troupe::model {

// Every tensor of `reg` from a host copy of a flat buffer laid out by `reg`
// (parameters, gradients, m or v), named prefix + name, in global shape. wte.weight
// is sliced to its vocab_size real rows, as Hugging Face stores it. Tensors must be
// whole (not tensor-parallel slices).
std::vector<StTensor> export_tensors(const ParameterRegistry& reg, const float* host_flat,
                                     const std::string& prefix = "");

// Fills a host flat buffer laid out by `reg` from `file`: each registry tensor's
// slice is read from the tensor prefix + name (with prefix "" a file written by
// GPT2LMHeadModel, "transformer.<name>", is accepted too). wte.weight may have
// vocab_size rows (padding rows become zero) or padded_vocab rows. The causal-mask
// buffers of Hugging Face files (h.N.attn.bias, h.N.attn.masked_bias) and
// lm_head.weight (tied) are ignored. Missing, misshapen or non-F32 tensors, and
// unknown tensors, are reported in one error naming the file.
void import_tensors(const ParameterRegistry& reg, const StFile& file, float* host_flat,
                    const std::string& prefix = "");

}  // namespace troupe::model
