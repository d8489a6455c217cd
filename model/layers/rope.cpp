#include "model/layers/rope.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::model::layers {

std::vector<double> rope_frequencies(const RopeConfig& c) {
  const int half = c.head_size / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) f[size_t(i)] = std::pow(c.theta, -2.0 * i / c.head_size);
  if (c.factor <= 0) return f;
  const double original = c.original_max_positions;
  const double low_wavelength = original / c.low_freq_factor, high_wavelength = original / c.high_freq_factor;
  for (double& x : f) {
    const double wavelength = 2 * std::numbers::pi / x;
    if (wavelength < high_wavelength) continue;
    if (wavelength > low_wavelength) {
      x /= c.factor;
      continue;
    }
    const double s = (original / wavelength - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
    x = (1 - s) * x / c.factor + s * x;
  }
  return f;
}

Rope::Rope(const RopeConfig& c, kernels::Device& device) : c_(c), dev_(device) {
  if (c.head_size < 2 || c.head_size % 2 != 0)
    throw std::invalid_argument("Rope: head size " + std::to_string(c.head_size) + " is not even");
  const int half = c.head_size / 2;
  const std::vector<double> f = rope_frequencies(c);
  std::vector<float> cos(size_t(c.max_positions) * half), sin(cos.size());
  for (int p = 0; p < c.max_positions; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = double(p) * f[size_t(i)];
      cos[size_t(p) * half + i] = float(std::cos(angle));
      sin[size_t(p) * half + i] = float(std::sin(angle));
    }
  cos_ = dev_.allocate(int64_t(cos.size()));
  sin_ = dev_.allocate(int64_t(sin.size()));
  dev_.copy_from_host(cos_.f32(), cos.data(), cos.size() * sizeof(float));
  dev_.copy_from_host(sin_.f32(), sin.data(), sin.size() * sizeof(float));
}

void Rope::forward(float* x, const int32_t* positions, int N, int heads, int64_t ld) const {
  dev_.rope_forward(x, positions, cos_.f32(), sin_.f32(), N, heads, c_.head_size, ld);
}

void Rope::backward(float* dx, const int32_t* positions, int N, int heads, int64_t ld) const {
  dev_.rope_backward(dx, positions, cos_.f32(), sin_.f32(), N, heads, c_.head_size, ld);
}

}  // namespace troupe::model::layers
