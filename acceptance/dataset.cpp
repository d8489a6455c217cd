#include "acceptance/dataset.h"

#include <array>
#include <filesystem>
#include <random>
#include <string_view>

#include "data/indexed_dataset.h"

namespace troupe::acceptance {
namespace {

constexpr std::array<std::string_view, 24> kWords = {
    "the",   "ladder", "owner",  "checks", "every", "update", "before", "main",
    "run",   "loss",   "tokens", "mask",   "packed", "window", "stage", "actor",
    "sends", "a",      "batch",  "of",     "data",  "and",    "saves", "state"};

// `length` tokens of text ending in EOD.
std::vector<int32_t> document(int length, std::mt19937_64& rng) {
  std::vector<int32_t> out;
  std::uniform_int_distribution<size_t> word(0, kWords.size() - 1);
  while (int(out.size()) < length - 1) {
    if (!out.empty()) out.push_back(' ');
    for (char ch : kWords[word(rng)]) out.push_back(static_cast<unsigned char>(ch));
  }
  out.resize(size_t(length - 1));
  out.push_back(kEod);
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> acceptance_documents(int seq_length, int groups, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0xacce97a9ce5eedULL);
  const int T = seq_length;
  // Short documents: two fit in one window of T + 1 slots, three do not.
  const int short_lo = (T + 1) / 3 + 1, short_hi = (T + 1) / 2;
  // Medium: longer than a short one, and too long to share a window with the next
  // group's long document.
  const int medium_lo = short_hi + 1, medium_hi = (3 * T) / 4;
  auto in = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> docs;
  for (int g = 0; g < groups; ++g) {
    docs.push_back(document(3 * T - in(2, 6), rng));
    docs.push_back(document(in(short_lo, short_hi), rng));
    docs.push_back(document(in(short_lo, short_hi), rng));
    docs.push_back(document(in(medium_lo, medium_hi), rng));
  }
  return docs;
}

std::string write_acceptance_dataset(const std::string& prefix, int seq_length, int groups, uint64_t seed) {
  std::filesystem::create_directories(std::filesystem::path(prefix).parent_path());
  data::IndexedDatasetWriter w(prefix, data::TokenDType::UInt16, 257);
  for (const auto& d : acceptance_documents(seq_length, groups, seed)) w.add_document(d);
  w.finish();
  return prefix;
}

}  // namespace troupe::acceptance
