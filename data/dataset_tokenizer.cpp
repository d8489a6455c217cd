#include "data/dataset_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/atomic_file.h"
#include "data/error.h"
#include "util/durable_file.h"

namespace troupe::data {

namespace fs = std::filesystem;

std::string dataset_tokenizer_path(const std::string& prefix) { return prefix + ".troupe-tokenizer.json"; }

namespace {

int64_t size_or_minus_one(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? -1 : int64_t(n);
}

}  // namespace

void write_dataset_tokenizer(const std::string& prefix, const DatasetTokenizer& t) {
  const nlohmann::json j = {{"tokenizer", t.tokenizer},
                            {"vocab_size", t.vocab_size},
                            {"eod", t.eod},
                            {"bin_bytes", size_or_minus_one(prefix + ".bin")},
                            {"idx_bytes", size_or_minus_one(prefix + ".idx")}};
  write_file_atomically(dataset_tokenizer_path(prefix), j.dump() + "\n");
}

std::optional<DatasetTokenizer> read_dataset_tokenizer(const std::string& prefix) {
  const std::string path = dataset_tokenizer_path(prefix);
  if (!fs::is_regular_file(path)) return std::nullopt;
  std::string text;
  try {
    text = util::read_file(path, "dataset tokenizer file");
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("bin_bytes").get<int64_t>() != size_or_minus_one(prefix + ".bin") ||
        j.at("idx_bytes").get<int64_t>() != size_or_minus_one(prefix + ".idx"))
      return std::nullopt;  // stale: the dataset was written again since
    return DatasetTokenizer{j.at("tokenizer").get<std::string>(), j.at("vocab_size").get<int64_t>(),
                            j.at("eod").get<int32_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not a dataset tokenizer file ({\"tokenizer\", \"vocab_size\", \"eod\", \"bin_bytes\", "
                    "\"idx_bytes\"}): " + e.what());
  }
}

}  // namespace troupe::data
