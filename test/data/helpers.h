// Shared helpers of the data tests: tiny datasets.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/error.h"
#include "data/indexed_dataset.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "messages/config.pb.h"
#include "test/support/scratch_dir.h"

namespace troupe::data::testing {

using ::troupe::testing::ScratchDir;  // test/support/scratch_dir.h

inline void write_text(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes one sequence per document.
inline void write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs,
                          int64_t vocab = 257) {
  IndexedDatasetWriter w(prefix, dtype_for_vocab(vocab), vocab);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
}

// A FIFO at `path` with no writer: opening it for reading the ordinary way blocks.
inline void make_fifo(const std::string& path) {
  if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path + " failed");
}

// Files in `dir` whose name contains ".tmp." (left-over temporaries).
inline int count_temporaries(const std::filesystem::path& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
  }
  return n;
}

// What prepare_dataset(o) throws (with the byte tokenizer), or "" when it succeeds.
inline std::string prepare_error(const PrepareOptions& o) {
  auto tok = make_byte_tokenizer();
  try {
    prepare_dataset(o, *tok);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

inline Config small_config(const std::string& prefix, int seq, int mbs, int dp, int global_batch) {
  Config c;
  c.mutable_data()->set_prefix(prefix);
  c.mutable_batch()->set_seq_length(seq);
  c.mutable_batch()->set_micro_batch_size(mbs);
  c.mutable_batch()->set_global_batch_size(global_batch);
  c.mutable_parallel()->set_data(dp);
  c.mutable_model()->set_vocab_size(257);
  c.mutable_training()->set_seed(7);
  return c;
}

}  // namespace troupe::data::testing
