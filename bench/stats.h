// What the benchmarks share: the median of a sample and the seconds one call takes.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace troupe::bench {

// The middle value, or the mean of the two middle ones (0 for an empty sample).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace troupe::bench
