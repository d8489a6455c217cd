// What `supervisor generate` runs: the whole model of a checkpoint or of a Hugging
// Face model directory, the tokenizer that goes with it, and the IDs that end a
// continuation (docs/huggingface.md, "Generating").
//
// The tokenizer: `tokenizer_file` (a tokenizer.json) when given; else, for a Hugging
// Face directory, its tokenizer.json, or its vocab.json + merges.txt (GPT-2's), or the
// byte tokenizer for a model of 257 IDs; for a checkpoint, the run's data.tokenizer
// (BYTES; GPT2 from data.vocab_file + data.merges_file; HF_JSON from
// data.tokenizer_file, as the run named them; NONE has none). When there is none, or
// its files cannot be read, `tokenizer` is null and `no_tokenizer` says why.
//
// The stop IDs: a Hugging Face directory's generation_config.json eos_token_id (one ID
// or a list), else its config.json's, as transformers' generate() reads them, else the
// tokenizer's end of document; a checkpoint's tokenizer's end of document (the run's
// data.eod_id, or ckpt::hf_eod_id, without one).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "messages/config.pb.h"

namespace troupe::engine {

struct GenerateSource {
  Config config;              // parallel.tensor = parallel.pipeline = 1: one whole model
  std::vector<float> params;  // laid out by the whole-model ParameterRegistry of `config`
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::string tokenizer_from;  // where it came from, for messages: "DIR/tokenizer.json", "bytes"
  std::string no_tokenizer;    // why there is none
  std::vector<int32_t> stop_ids;
};

// `dir`: a checkpoint directory or root (the newest complete checkpoint; `report`
// gets the loader's lines about what it skipped) or a Hugging Face model directory
// (config.json present). Throws CheckpointError / ConfigError / DataError naming the
// file for a model that cannot be read or a `tokenizer_file` that is not a tokenizer.
GenerateSource open_generate_source(const std::string& dir, const std::string& tokenizer_file,
                                    std::vector<std::string>* report);

}  // namespace troupe::engine
