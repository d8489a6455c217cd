// The tokenizer files `supervisor export` writes beside the weights, so that
// transformers' AutoTokenizer.from_pretrained(DIR) (and tokenizers'
// Tokenizer.from_file(DIR/tokenizer.json)) encodes text to the IDs the run trained on:
//   BYTES   tokenizer.json: byte-level BPE with the 256 byte tokens at IDs 0..255 in
//           byte order and no merges (each byte its own ID, as troupe's byte tokenizer),
//           <|endoftext|> at 256
//   GPT2    vocab.json and merges.txt (the run's), and the same as a tokenizer.json
//   HF_JSON the run's tokenizer.json, byte for byte
//   NONE    nothing: no Hugging Face tokenizer exists for a dataset tokenized elsewhere
// with a tokenizer_config.json (PreTrainedTokenizerFast, the EOD as eos_token). BYTES
// and GPT2 read "<|endoftext|>" in text as plain text, where HF matches it as the
// special token: their tokenizer_config.json sets split_special_tokens, so
// AutoTokenizer reads it as text too (tokenizers' Tokenizer needs
// encode_special_tokens = True for that); the notes say so.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::data {

struct TokenizerExport {
  std::vector<std::pair<std::string, std::string>> files;  // name in the export folder, bytes
  std::vector<std::string> notes;                          // lines for the export's output
};

// Reads the run's tokenizer files (paths as its config names them) and builds what
// goes into the export; writes nothing. Throws DataError naming a file that cannot be
// read or is not a tokenizer of its kind.
TokenizerExport hf_tokenizer_export(const Config& config);

// Writes each file into `out_dir` (which exists) atomically; returns their paths.
std::vector<std::string> write_tokenizer_export(const TokenizerExport& e, const std::string& out_dir);

}  // namespace troupe::data
