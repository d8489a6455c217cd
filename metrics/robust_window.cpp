#include "metrics/robust_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::metrics {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size(), mid = n / 2;
  std::nth_element(values.begin(), values.begin() + long(mid), values.end());
  const double upper = values[mid];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + long(mid));
  return 0.5 * (lower + upper);
}

double mad_of(const std::vector<double>& values, double median) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values) dev.push_back(std::fabs(v - median));
  return median_of(std::move(dev));
}

bool exceeds_robustly(double value, double median, double mad, double k, double min_jump) {
  return value > median + k * mad && value > median * (1 + min_jump);
}

RobustJudgement RobustWindow::judge(double value, double k, double min_jump) const {
  const std::vector<double> v(values_.begin(), values_.end());
  RobustJudgement j;
  j.median = median_of(v);
  j.mad = mad_of(v, j.median);
  j.ratio = j.median != 0 ? value / j.median : std::numeric_limits<double>::quiet_NaN();
  j.exceeds = std::isfinite(value) && exceeds_robustly(value, j.median, j.mad, k, min_jump);
  return j;
}

void RobustWindow::add(double value) {
  if (!std::isfinite(value)) return;
  values_.push_back(value);
  if (values_.size() > capacity_) values_.pop_front();
}

double RobustWindow::median() const { return median_of({values_.begin(), values_.end()}); }

}  // namespace troupe::metrics
