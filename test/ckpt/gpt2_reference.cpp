#include "test/ckpt/gpt2_reference.h"

#include <cmath>

namespace troupe::ckpt::testing {
namespace {

using Mat = std::vector<double>;  // row-major

// x [T, D] -> LayerNorm over each row with scale w and shift b (biased variance).
Mat layer_norm(const Mat& x, int T, int D, const std::vector<float>& w,
               const std::vector<float>& b, double eps) {
  Mat y(x.size());
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int i = 0; i < D; ++i) mean += x[t * D + i];
    mean /= D;
    for (int i = 0; i < D; ++i) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
    var /= D;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int i = 0; i < D; ++i) y[t * D + i] = (x[t * D + i] - mean) * inv * w[i] + b[i];
  }
  return y;
}

// x [T, in] @ W [in, out] + b [out].
Mat linear(const Mat& x, int T, int in, int out, const std::vector<float>& W,
           const std::vector<float>& b) {
  Mat y(size_t(T) * out);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int i = 0; i < in; ++i) s += x[t * in + i] * W[size_t(i) * out + o];
      y[size_t(t) * out + o] = s;
    }
  return y;
}

double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

}  // namespace

std::vector<double> gpt2_reference_logits(
    const Gpt2Dims& d, const std::function<const std::vector<float>&(const std::string&)>& weight,
    const std::vector<int>& tokens) {
  const int T = int(tokens.size()), D = d.width, H = d.heads, hs = D / H;
  const auto& wte = weight("wte.weight");
  const auto& wpe = weight("wpe.weight");
  Mat x(size_t(T) * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D; ++i)
      x[t * D + i] = double(wte[size_t(tokens[t]) * D + i]) + wpe[size_t(t) * D + i];
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const Mat a = layer_norm(x, T, D, weight(p + "ln_1.weight"), weight(p + "ln_1.bias"), d.eps);
    const Mat qkv = linear(a, T, D, 3 * D, weight(p + "attn.c_attn.weight"),
                           weight(p + "attn.c_attn.bias"));
    Mat y(size_t(T) * D, 0.0);
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        // Causal attention of query t over keys 0..t, head h.
        std::vector<double> s(size_t(t) + 1);
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < hs; ++i)
            dot += qkv[size_t(t) * 3 * D + h * hs + i] * qkv[size_t(u) * 3 * D + D + h * hs + i];
          s[u] = dot / std::sqrt(double(hs));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (auto& v : s) z += (v = std::exp(v - mx));
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < hs; ++i)
            y[size_t(t) * D + h * hs + i] += s[u] / z * qkv[size_t(u) * 3 * D + 2 * D + h * hs + i];
      }
    const Mat proj = linear(y, T, D, D, weight(p + "attn.c_proj.weight"), weight(p + "attn.c_proj.bias"));
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    const Mat m = layer_norm(x, T, D, weight(p + "ln_2.weight"), weight(p + "ln_2.bias"), d.eps);
    Mat hdn = linear(m, T, D, d.ffn, weight(p + "mlp.c_fc.weight"), weight(p + "mlp.c_fc.bias"));
    for (auto& v : hdn) v = gelu_tanh(v);
    const Mat out = linear(hdn, T, d.ffn, D, weight(p + "mlp.c_proj.weight"), weight(p + "mlp.c_proj.bias"));
    for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
  }
  const Mat f = layer_norm(x, T, D, weight("ln_f.weight"), weight("ln_f.bias"), d.eps);
  std::vector<double> logits(size_t(T) * d.vocab);
  for (int t = 0; t < T; ++t)
    for (int v = 0; v < d.vocab; ++v) {
      double s = 0;
      for (int i = 0; i < D; ++i) s += f[t * D + i] * wte[size_t(v) * D + i];
      logits[size_t(t) * d.vocab + v] = s;
    }
  return logits;
}

}  // namespace troupe::ckpt::testing
