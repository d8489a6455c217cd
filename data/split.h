// Megatron's --split: "train,valid,test" weights (',' or '/' separated, fewer than
// three means the rest are 0) over documents, as contiguous ranges in file order.
// The rounding follows Megatron's get_split_indices: boundary k is the running sum
// of round(weight_k / total * documents) (Python's round: halves to even), then all boundaries shift so the last is
// exactly the document count.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace troupe::data {

enum class Split { Train, Valid, Test };
const char* split_name(Split s);

struct DocumentRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Throws DataError naming the field ("data.split") when the string is malformed.
std::array<DocumentRange, 3> split_documents(const std::string& split, int64_t documents);

}  // namespace troupe::data
