// Corpus files -> a Megatron indexed dataset: each document is tokenized, EOD is
// appended, and it is written as one sequence = one document. Output goes to
// temporary names and is renamed into place at the end (nothing half-written).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/tokenizer.h"

namespace troupe::data {

struct PrepareProgress {
  int64_t bytes_done = 0;   // input bytes read (compressed bytes for compressed files)
  int64_t bytes_total = 0;
  int64_t files_done = 0;   // written to the dataset
  int64_t files_total = 0;
  int64_t documents = 0;    // written
  int64_t tokens = 0;       // written, EOD included
  double seconds = 0;
  // Seconds left at the rate so far (bytes), or -1 before there is a rate.
  double eta_seconds() const {
    return bytes_done > 0 && seconds > 0 ? double(bytes_total - bytes_done) * seconds / double(bytes_done) : -1;
  }
};

struct PrepareOptions {
  // Files, directories (their regular files, not symlinks, sorted by name; in fortune
  // format strfile's *.dat and the *.u8 links are skipped), or patterns ("dir/*.jsonl.zst",
  // quoted past the shell: their matches, sorted). A file named here must be a regular
  // file (or a symlink to one): a FIFO or device is refused.
  std::vector<std::string> inputs;
  std::string output_prefix;
  InputFormat format = InputFormat::Auto;
  // The string column of Parquet inputs that holds the documents.
  std::string parquet_column = "text";
  // When set, documents are held in memory and written in an order shuffled with
  // this seed (the embedded default uses it so that a contiguous validation split
  // is drawn from every fortune file, not from the last ones).
  std::optional<uint64_t> shuffle_seed;
  // Each document encoded with its tokenizer's special tokens (HF's
  // add_special_tokens=True: a Llama 3 tokenizer.json's BOS first), then EOD. Off by
  // default, as Megatron-LM's preprocessing adds no BOS per document (docs/data.md).
  bool add_special_tokens = false;
  // Called about twice a second while working, and once at the end.
  std::function<void(const PrepareProgress&)> progress;
  // Files (or pieces of a large JSON-lines file, piece_bytes) tokenized at once, each on
  // a thread with a tokenizer of its own from
  // make_tokenizer (tokenizers cache, so one is never shared). The dataset is the same
  // whatever the number: documents are written in file order, and in each file's
  // order. Each file in flight is held in memory as its token IDs until its turn to be
  // written (at most threads + 1 files). 1, or no make_tokenizer: one file at a time,
  // streamed.
  int threads = 1;
  std::function<std::unique_ptr<Tokenizer>()> make_tokenizer;
  // With threads > 1, an uncompressed JSON-lines file of at least two pieces of this many
  // bytes is tokenized as pieces cut at line ends, each a work item like a file (the
  // dataset is the same: pieces are written in order).
  size_t piece_bytes = size_t(32) << 20;
};

// An input file format Auto did not read because it is not text (data/corpus_reader.h).
struct SkippedFile {
  std::string path;
  std::string reason;  // from not_text: "a NUL byte at offset 12", ...
  bool operator==(const SkippedFile&) const = default;
};

struct PrepareSummary {
  int64_t files = 0;  // read; the skipped ones are not counted
  std::vector<SkippedFile> skipped_not_text;  // each also logged as a warning
  int64_t documents = 0;
  int64_t skipped_empty = 0;
  int64_t tokens = 0;  // EOD included
  int64_t input_bytes = 0;
  double seconds = 0;      // wall clock, fsync included
  double cpu_seconds = 0;  // CPU time of the process (of the calling thread with one thread)
  std::string bin_path, idx_path;
  std::string dtype;
  double mb_per_s() const { return seconds > 0 ? double(input_bytes) / 1e6 / seconds : 0; }
  // Throughput per core: input MB per CPU second (not counting waits for the disk
  // or for other processes on a busy machine).
  double mb_per_cpu_s() const { return cpu_seconds > 0 ? double(input_bytes) / 1e6 / cpu_seconds : 0; }
};

// Expands directories as described above, and a pattern (*, ?, [...]) that names no
// path as it is into its matches, sorted; throws DataError for a missing input or a
// pattern that matches nothing. The embedded default corpus lists the fortunes
// directory through it too.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, InputFormat format);

// Throws DataError (naming file and line/offset) on bad input, and when no
// document at all was found (an empty corpus).
PrepareSummary prepare_dataset(const PrepareOptions& options, Tokenizer& tokenizer);

}  // namespace troupe::data
