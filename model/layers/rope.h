// Rotary position embedding (Llama): the cos and sin tables of every position and
// frequency, computed once on the host in double and held on the device, and the
// rotation of q and k heads by their tokens' positions (Device::rope_*).
//
// Frequencies (head size hs, i < hs/2): f_i = theta^(-2i / hs), then Llama 3's
// scaling when RopeConfig::factor > 0 (Hugging Face's rope_type "llama3"): with
// wavelength w = 2 pi / f, low = original / low_freq_factor and high = original /
// high_freq_factor,
//   w < high:  f stays;   w > low:  f / factor;
//   between:   (1 - s) f / factor + s f,  s = (original / w - low_freq_factor) /
//                                              (high_freq_factor - low_freq_factor).
// Tables [max_positions, hs/2]: cos[p, i] = cos(p f_i), sin[p, i] = sin(p f_i).
#pragma once

#include <vector>

#include "kernels/buffer.h"
#include "kernels/device.h"

namespace troupe::model::layers {

struct RopeConfig {
  int head_size = 0;      // hs (even)
  int max_positions = 0;  // rows of the tables
  double theta = 10000;
  double factor = 0;  // 0: no scaling
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_positions = 8192;
};

// f_i for i < hs/2 (double).
std::vector<double> rope_frequencies(const RopeConfig& c);

class Rope {
 public:
  Rope(const RopeConfig& c, kernels::Device& device);
  int head_size() const { return c_.head_size; }
  // Floats of the two device tables.
  int64_t table_floats() const { return cos_.count() + sin_.count(); }
  // x: N rows of stride ld floats; `heads` heads of hs at its start are rotated in
  // place by positions[n] (device memory, [N]).
  void forward(float* x, const int32_t* positions, int N, int heads, int64_t ld) const;
  // dx (same layout) rotated back: the gradient before the rotation.
  void backward(float* dx, const int32_t* positions, int N, int heads, int64_t ld) const;

 private:
  RopeConfig c_;
  kernels::Device& dev_;
  kernels::Buffer cos_, sin_;
};

}  // namespace troupe::model::layers
