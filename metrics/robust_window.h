// A running window of the last N finite values of one series (a step's loss, its
// pre-clip gradient norm) and the robust test the spike detector applies to a new
// value: above the window's median M by more than k median absolute deviations
// (MAD = median of |x - M| over the window) AND above M x (1 + min_jump). The MAD
// term adapts to how noisy the series is; the floor keeps a quiet series (MAD near 0)
// from firing on a tiny wiggle. With MAD = 0 (a constant window) only the floor
// decides. docs/metrics.md, "Spikes".
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

namespace troupe::metrics {

// Median of `values` (mean of the two middle ones for an even count); 0 when empty.
double median_of(std::vector<double> values);

// Median absolute deviation of `values` around `median`; 0 when empty.
double mad_of(const std::vector<double>& values, double median);

// How a value compares with a window.
struct RobustJudgement {
  double median = 0;  // of the window before the value joined it
  double mad = 0;
  double ratio = 0;      // value / median (non-finite when the median is 0 or the value is)
  bool exceeds = false;  // value > median + k x MAD and value > median x (1 + min_jump)
};

// The rule on its own, for a window's median and MAD (value finite).
bool exceeds_robustly(double value, double median, double mad, double k, double min_jump);

class RobustWindow {
 public:
  explicit RobustWindow(int capacity) : capacity_(size_t(capacity)) {}

  // Compares a finite value with the values already in (does not add it).
  RobustJudgement judge(double value, double k, double min_jump) const;
  // Adds a finite value (a non-finite one is ignored), dropping the oldest when full.
  void add(double value);

  double median() const;
  size_t size() const { return values_.size(); }

 private:
  size_t capacity_;
  std::deque<double> values_;
};

}  // namespace troupe::metrics
