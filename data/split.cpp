#include "data/split.h"

#include <cmath>
#include <vector>

#include "data/error.h"

namespace troupe::data {

const char* split_name(Split s) {
  switch (s) {
    case Split::Train: return "train";
    case Split::Valid: return "valid";
    case Split::Test: return "test";
  }
  return "?";
}

std::array<DocumentRange, 3> split_documents(const std::string& split, int64_t documents) {
  auto bad = [&](const std::string& why) {
    return DataError("data.split \"" + split + "\": " + why +
                     " (expected up to three non-negative weights such as \"98,2,0\")");
  };
  std::vector<double> w;
  std::string cur;
  auto take = [&]() {
    if (cur.empty()) throw bad("empty weight");
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(cur, &used);
    } catch (const std::exception&) {
      throw bad("'" + cur + "' is not a number");
    }
    if (used != cur.size()) throw bad("'" + cur + "' is not a number");
    if (!(v >= 0) || !std::isfinite(v)) throw bad("weight '" + cur + "' is negative or not finite");
    w.push_back(v);
    cur.clear();
  };
  for (char c : split) {
    if (c == ',' || c == '/') {
      take();
    } else if (c != ' ') {
      cur += c;
    }
  }
  take();
  if (w.size() > 3) throw bad("more than three weights");
  while (w.size() < 3) w.push_back(0);
  const double total = w[0] + w[1] + w[2];
  if (total <= 0) throw bad("the weights sum to 0");

  std::array<int64_t, 4> idx{0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    idx[size_t(k) + 1] = idx[size_t(k)] + int64_t(std::nearbyint(w[size_t(k)] / total * double(documents)));
  }
  const int64_t diff = idx[3] - documents;
  for (int k = 1; k < 4; ++k) idx[size_t(k)] -= diff;
  std::array<DocumentRange, 3> out;
  for (int k = 0; k < 3; ++k) {
    out[size_t(k)] = {std::max<int64_t>(0, idx[size_t(k)]), std::max<int64_t>(0, idx[size_t(k) + 1])};
  }
  return out;
}

}  // namespace troupe::data
