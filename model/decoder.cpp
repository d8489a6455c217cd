#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "config/derived.h"
#include "model/init.h"
#include "model/layers/rope.h"

namespace troupe::model {
namespace {

// out[o] = sum_i x[i] w[i, o] (+ b[o]): a Conv1D [in, out] weight (GPT-2).
void conv1d(const std::vector<double>& x, const float* w, const float* b, int in, int out, std::vector<double>& y) {
  y.assign(size_t(out), 0.0);
  for (int i = 0; i < in; ++i) {
    const double xi = x[size_t(i)];
    const float* row = w + int64_t(i) * out;
    for (int o = 0; o < out; ++o) y[size_t(o)] += xi * row[o];
  }
  if (b)
    for (int o = 0; o < out; ++o) y[size_t(o)] += b[o];
}

// y[o] = sum_i w[o, i] x[i]: an nn.Linear [out, in] weight (Llama, the heads).
void linear(const std::vector<double>& x, const float* w, int in, int out, std::vector<double>& y) {
  y.assign(size_t(out), 0.0);
  for (int o = 0; o < out; ++o) {
    const float* row = w + int64_t(o) * in;
    double s = 0;
    for (int i = 0; i < in; ++i) s += row[i] * x[size_t(i)];
    y[size_t(o)] = s;
  }
}

std::vector<double> layer_norm(const std::vector<double>& x, const float* w, const float* b, double eps) {
  const size_t n = x.size();
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= double(n);
  for (double v : x) var += (v - mean) * (v - mean);
  var /= double(n);
  const double inv = 1 / std::sqrt(var + eps);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0);
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const float* w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= double(x.size());
  const double inv = 1 / std::sqrt(ms + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

}  // namespace

Decoder::Decoder(const ModelSpec& spec, std::vector<float> params)
    : spec_(spec),
      reg_(spec, StageRange{0, spec.model.layers()}),
      p_(std::move(params)),
      llama_(spec.model.architecture() == ModelConfig::LLAMA) {
  const auto& m = spec.model;
  if (int64_t(p_.size()) != reg_.total())
    throw std::invalid_argument("Decoder: " + std::to_string(p_.size()) + " parameters, the model has " +
                                std::to_string(reg_.total()));
  D_ = m.width();
  NH_ = m.heads();
  KV_ = int(config::kv_heads(m));
  hs_ = int(config::head_size(m));
  F_ = int(config::ffn_width(m));
  V_ = m.vocab_size();
  P_ = m.max_positions();
  eps_ = config::norm_eps(m);
  if (llama_) {
    layers::RopeConfig rc;
    rc.head_size = hs_;
    rc.max_positions = P_;
    rc.theta = m.rope_theta();
    rc.factor = m.rope_scaling().factor();
    rc.low_freq_factor = m.rope_scaling().low_freq_factor();
    rc.high_freq_factor = m.rope_scaling().high_freq_factor();
    rc.original_max_positions = m.rope_scaling().original_max_positions();
    freq_ = layers::rope_frequencies(rc);
  }
  k_cache_.assign(size_t(m.layers()), std::vector<float>(size_t(P_) * KV_ * hs_));
  v_cache_.assign(size_t(m.layers()), std::vector<float>(size_t(P_) * KV_ * hs_));
}

void Decoder::attention(int layer, const std::vector<double>& q, std::vector<double>& out) {
  // q [NH * hs] of this position; the cache holds positions [0, position_]; out [NH * hs].
  out.assign(size_t(NH_) * hs_, 0.0);
  const int T = position_ + 1, group = NH_ / KV_;
  const double scale = 1 / std::sqrt(double(hs_));
  std::vector<double> score(static_cast<size_t>(T));
  for (int h = 0; h < NH_; ++h) {
    const int kvh = h / group;
    double mx = -INFINITY;
    for (int t = 0; t < T; ++t) {
      const float* k = k_cache_[size_t(layer)].data() + (int64_t(t) * KV_ + kvh) * hs_;
      double s = 0;
      for (int i = 0; i < hs_; ++i) s += q[size_t(h * hs_ + i)] * k[i];
      score[size_t(t)] = s * scale;
      mx = std::max(mx, score[size_t(t)]);
    }
    double sum = 0;
    for (auto& s : score) sum += (s = std::exp(s - mx));
    for (int t = 0; t < T; ++t) {
      const float* v = v_cache_[size_t(layer)].data() + (int64_t(t) * KV_ + kvh) * hs_;
      const double a = score[size_t(t)] / sum;
      for (int i = 0; i < hs_; ++i) out[size_t(h * hs_ + i)] += a * v[i];
    }
  }
}

std::vector<float> Decoder::step(int32_t token) {
  if (position_ >= P_)
    throw std::invalid_argument("generation reached model.max_positions = " + std::to_string(P_));
  if (token < 0 || token >= V_)
    throw std::invalid_argument("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                std::to_string(V_) + ")");
  const float* P = p_.data();
  const auto at = [&](const std::string& name) { return P + reg_.at(name).offset; };
  const int p = position_;
  std::vector<double> x(static_cast<size_t>(D_)), h, q, k, v, a, o, f, g;
  const float* emb = P + reg_.wte_offset() + int64_t(token) * D_;
  for (int i = 0; i < D_; ++i) x[size_t(i)] = emb[i];
  if (!llama_) {
    const float* pos = P + reg_.wpe_offset() + int64_t(p) * D_;
    for (int i = 0; i < D_; ++i) x[size_t(i)] += pos[i];
  }
  const int KVs = KV_ * hs_;
  for (int l = 0; l < spec_.model.layers(); ++l) {
    const std::string b = llama_ ? "model.layers." + std::to_string(l) + "." : "h." + std::to_string(l) + ".";
    float* kc = k_cache_[size_t(l)].data() + int64_t(p) * KVs;
    float* vc = v_cache_[size_t(l)].data() + int64_t(p) * KVs;
    if (!llama_) {
      h = layer_norm(x, at(b + "ln_1.weight"), at(b + "ln_1.bias"), eps_);
      std::vector<double> qkv;
      conv1d(h, at(b + "attn.c_attn.weight"), at(b + "attn.c_attn.bias"), D_, 3 * D_, qkv);
      q.assign(qkv.begin(), qkv.begin() + D_);
      for (int i = 0; i < D_; ++i) {
        kc[i] = float(qkv[size_t(D_ + i)]);
        vc[i] = float(qkv[size_t(2 * D_ + i)]);
      }
      attention(l, q, a);
      conv1d(a, at(b + "attn.c_proj.weight"), at(b + "attn.c_proj.bias"), D_, D_, o);
      for (int i = 0; i < D_; ++i) x[size_t(i)] += o[size_t(i)];
      h = layer_norm(x, at(b + "ln_2.weight"), at(b + "ln_2.bias"), eps_);
      conv1d(h, at(b + "mlp.c_fc.weight"), at(b + "mlp.c_fc.bias"), D_, F_, f);
      for (auto& e : f) e = gelu_tanh(e);
      conv1d(f, at(b + "mlp.c_proj.weight"), at(b + "mlp.c_proj.bias"), F_, D_, o);
      for (int i = 0; i < D_; ++i) x[size_t(i)] += o[size_t(i)];
    } else {
      h = rms_norm(x, at(b + "input_layernorm.weight"), eps_);
      linear(h, at(b + "self_attn.q_proj.weight"), D_, NH_ * hs_, q);
      linear(h, at(b + "self_attn.k_proj.weight"), D_, KVs, k);
      linear(h, at(b + "self_attn.v_proj.weight"), D_, KVs, v);
      // Rotary: pairs (i, i + hs/2) of every head rotated by p f_i.
      const int half = hs_ / 2;
      const auto rotate = [&](std::vector<double>& t, int heads) {
        for (int hh = 0; hh < heads; ++hh)
          for (int i = 0; i < half; ++i) {
            const double cs = std::cos(p * freq_[size_t(i)]), sn = std::sin(p * freq_[size_t(i)]);
            double& x1 = t[size_t(hh * hs_ + i)];
            double& x2 = t[size_t(hh * hs_ + i + half)];
            const double r1 = x1 * cs - x2 * sn, r2 = x2 * cs + x1 * sn;
            x1 = r1;
            x2 = r2;
          }
      };
      rotate(q, NH_);
      rotate(k, KV_);
      for (int i = 0; i < KVs; ++i) {
        kc[i] = float(k[size_t(i)]);
        vc[i] = float(v[size_t(i)]);
      }
      attention(l, q, a);
      linear(a, at(b + "self_attn.o_proj.weight"), NH_ * hs_, D_, o);
      for (int i = 0; i < D_; ++i) x[size_t(i)] += o[size_t(i)];
      h = rms_norm(x, at(b + "post_attention_layernorm.weight"), eps_);
      linear(h, at(b + "mlp.gate_proj.weight"), D_, F_, f);
      linear(h, at(b + "mlp.up_proj.weight"), D_, F_, g);
      for (int i = 0; i < F_; ++i) {
        const double s = f[size_t(i)];
        f[size_t(i)] = s / (1 + std::exp(-s)) * g[size_t(i)];
      }
      linear(f, at(b + "mlp.down_proj.weight"), F_, D_, o);
      for (int i = 0; i < D_; ++i) x[size_t(i)] += o[size_t(i)];
    }
  }
  h = llama_ ? rms_norm(x, P + reg_.lnf_w_offset(), eps_)
             : layer_norm(x, P + reg_.lnf_w_offset(), P + reg_.lnf_b_offset(), eps_);
  std::vector<double> logits;
  linear(h, P + reg_.head_offset(), D_, V_, logits);  // the first vocab_size rows: padding never predicted
  ++position_;
  return std::vector<float>(logits.begin(), logits.end());
}

int32_t next_token(const std::vector<float>& logits, const SamplingOptions& o, int64_t step) {
  const int n = int(logits.size());
  if (o.temperature <= 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  // Highest logits first, ties by id, so the candidate order is fixed.
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const int k = o.top_k > 0 ? std::min(o.top_k, n) : n;
  std::vector<double> w(static_cast<size_t>(k));
  const double mx = logits[size_t(ids[0])];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += (w[size_t(i)] = std::exp((logits[size_t(ids[size_t(i)])] - mx) / o.temperature));
  const auto r = philox4x32_10({uint32_t(step), uint32_t(uint64_t(step) >> 32), 0, 0},
                               {uint32_t(o.seed), uint32_t(o.seed >> 32)});
  const double u = (double(r[0]) + 0.5) / 4294967296.0 * sum;  // in (0, sum)
  double acc = 0;
  for (int i = 0; i < k; ++i)
    if ((acc += w[size_t(i)]) >= u) return int32_t(ids[size_t(i)]);
  return int32_t(ids[size_t(k - 1)]);
}

std::vector<int32_t> continue_prompt(TokenStepper& stepper, const ModelSpec& spec, const std::vector<int32_t>& prompt,
                                     int max_tokens, const SamplingOptions& o, const std::vector<int32_t>& stop_ids,
                                     bool ignore_stop) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  std::vector<float> logits;
  for (const int32_t t : prompt) logits = stepper.step(t);
  std::vector<int32_t> out;
  for (int s = 0; s < max_tokens; ++s) {
    const int32_t next = next_token(logits, o, s);
    out.push_back(next);
    const bool stop = !ignore_stop && std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end();
    if (stop || stepper.position() >= spec.model.max_positions()) break;
    logits = stepper.step(next);
  }
  return out;
}

std::vector<int32_t> continue_prompt(const ModelSpec& spec, std::vector<float> params,
                                     const std::vector<int32_t>& prompt, int max_tokens, const SamplingOptions& o,
                                     const std::vector<int32_t>& stop_ids, bool ignore_stop) {
  Decoder decoder(spec, std::move(params));
  return continue_prompt(decoder, spec, prompt, max_tokens, o, stop_ids, ignore_stop);
}

}  // namespace troupe::model
