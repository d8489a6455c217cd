#include "metrics/human_units.h"

#include <cmath>
#include <cstdio>

namespace troupe::metrics {
namespace {

// `v` in [0, 1000) with three significant digits, trailing zeros (and a bare
// point) removed.
std::string three_digits(double v) {
  char buf[32];
  if (v >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (v >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

std::string non_finite(double v) { return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

// Splits |value| into a mantissa in [1, 1000) after rounding to three significant
// digits, and the power-of-1000 index of its prefix.
void scale(double a, double& mantissa, int& prefix) {
  prefix = 0;
  mantissa = a;
  while (mantissa >= 1000 && prefix < 6) {
    mantissa /= 1000;
    ++prefix;
  }
  // Rounding may carry into the next prefix: 999.7 k prints as 1000 k otherwise.
  const double rounded = mantissa >= 100 ? std::round(mantissa) : mantissa;
  if (rounded >= 1000 && prefix < 6) {
    mantissa = rounded / 1000;
    ++prefix;
  }
}

}  // namespace

std::string format_si(double value) {
  if (!std::isfinite(value)) return non_finite(value);
  static const char* const kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  const bool neg = value < 0;
  const double a = std::fabs(value);
  std::string out;
  if (a == 0) {
    out = "0";
  } else if (a < 1) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", a);
    out = buf;
  } else {
    double m;
    int p;
    scale(a, m, p);
    out = three_digits(m);
    if (p > 0) out += std::string(" ") + kPrefix[p];
  }
  return neg ? "-" + out : out;
}

std::string format_rate(double tokens_per_s, const char* unit) { return format_si(tokens_per_s) + " " + unit; }

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return non_finite(bytes);
  static const char* const kUnit[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  const bool neg = bytes < 0;
  const double a = std::fabs(bytes);
  double m;
  int p;
  scale(a, m, p);
  std::string out = (a < 1 ? std::string("0") : three_digits(m)) + " " + kUnit[a < 1 ? 0 : p];
  return neg ? "-" + out : out;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  char buf[48];
  if (seconds < 10) {
    std::snprintf(buf, sizeof buf, "%.2fs", seconds);
    // 9.996 would print as "10.00s": let the next branch format it.
    if (std::string(buf) != "10.00s") return buf;
  }
  if (seconds < 59.95) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    return buf;
  }
  const int64_t s = std::llround(seconds);
  if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else if (s < 86400) {
    const int64_t m = s / 60;  // whole minutes: a duration is never rounded up past its hour
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(m / 60), static_cast<long long>(m % 60));
  } else {
    const int64_t h = s / 3600;
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(h / 24), static_cast<long long>(h % 24));
  }
  return buf;
}

std::string format_thousands(int64_t value) {
  // Via unsigned so that INT64_MIN has a magnitude.
  const bool neg = value < 0;
  uint64_t mag = neg ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  std::string digits = std::to_string(mag);
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return neg ? "-" + out : out;
}

}  // namespace troupe::metrics
