// What `supervisor import-config DIR` prints (docs/huggingface.md): the model section of
// a Hugging Face config.json (config/hf_config.h), checked by troupe's validation as a
// config of its own, preceded by comment lines: where it came from with its parameter
// count, and the tokenizer settings (data section) its vocabulary fits. The model is
// the same whatever the tokenizer: a vocabulary below the byte tokenizer's 257 IDs
// (a tiny test model) imports too, with a note saying BYTES does not fit it and
// what does.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::config {

// Comment lines ("# ...\n") naming the data.tokenizer settings a model of `vocab_size`
// IDs trains with: HF_JSON (`tokenizer_json`, the directory's tokenizer.json, when it
// has one; else any whose IDs are below vocab_size), NONE (a dataset tokenized
// elsewhere), BYTES from 257 IDs (256 bytes + EOD), GPT2 from 50257.
std::string tokenizer_note(int64_t vocab_size, const std::string& tokenizer_json);

// The whole output for the config.json text `json` read from `source`: "# from
// SOURCE: N parameters ...", tokenizer_note, then the model section. Throws
// ConfigError for a config.json troupe cannot express and for a model section
// validation refuses (naming source).
std::string import_config_text(const std::string& json, const std::string& source, const std::string& tokenizer_json);

}  // namespace troupe::config
