#include "test/model/reference_forward.h"

#include <cmath>

#include "config/derived.h"

namespace troupe::testing {
namespace {

using Vec = std::vector<double>;

void layernorm(Vec& out, const Vec& x, const double* w, const double* b, int N, int C, double eps) {
  out.assign(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* r = &x[size_t(n) * C];
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += r[c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (r[c] - mean) * (r[c] - mean);
    var /= C;
    const double s = 1.0 / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = (r[c] - mean) * s * w[c] + b[c];
  }
}

// out[N, OC] = x[N, C] W[C, OC] + b
void conv1d(Vec& out, const Vec& x, const double* W, const double* b, int N, int C, int OC) {
  out.assign(size_t(N) * OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int c = 0; c < C; ++c) s += x[size_t(n) * C + c] * W[size_t(c) * OC + o];
      out[size_t(n) * OC + o] = s;
    }
}

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

}  // namespace

double hidden_dropout_factor(const Config& c, const data::Microbatch& mb, int layer, kernels::DropoutSite site, int n,
                             int col) {
  const float p = c.model().hidden_dropout();
  if (!(p > 0) || mb.first_slot < 0) return 1.0;
  const auto m = kernels::make_dropout_mask(p, kernels::dropout_key(c.training().seed(), layer, site), mb.first_slot, 0);
  return kernels::dropout_keep(m, m.key, mb.first_slot + n / mb.seq, n % mb.seq, col) ? double(m.scale) : 0.0;
}

void reference_hidden_dropout(std::vector<double>& x, const Config& c, const data::Microbatch& mb, int layer,
                              kernels::DropoutSite site, int D) {
  for (size_t i = 0; i < x.size(); ++i)
    x[i] *= hidden_dropout_factor(c, mb, layer, site, int(i / size_t(D)), int(i % size_t(D)));
}

ReferenceOutput reference_forward(const Config& c, const model::ParameterRegistry& reg,
                                  const std::vector<double>& params, const data::Microbatch& mb,
                                  const std::vector<double>* input) {
  if (c.model().architecture() == ModelConfig::LLAMA) return llama_reference_forward(c, reg, params, mb, input);
  const int B = mb.batch, T = mb.seq, N = B * T;
  const int D = c.model().width(), NH = c.model().heads(), hs = D / NH;
  const int F = int(config::ffn_width(c.model())), V = c.model().vocab_size();
  const double eps = c.model().layernorm_eps();
  const double* P = params.data();
  ReferenceOutput out;

  Vec x(size_t(N) * D);
  if (reg.range().has_embedding()) {
    const double* wte = P + reg.at("wte.weight").offset;
    const double* wpe = P + reg.at("wpe.weight").offset;
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d)
        x[size_t(n) * D + d] = wte[size_t(mb.tokens[size_t(n)]) * D + d] + wpe[size_t(mb.positions[size_t(n)]) * D + d];
    reference_hidden_dropout(x, c, mb, 0, kernels::DropoutSite::kEmbedding, D);
  } else {
    x = *input;
  }

  Vec ln, qkv, att(size_t(N) * D), tmp, h;
  for (int l = reg.range().first_layer; l < reg.range().last_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    auto W = [&](const char* name) { return P + reg.at(p + name).offset; };
    layernorm(ln, x, W("ln_1.weight"), W("ln_1.bias"), N, D, eps);
    conv1d(qkv, ln, W("attn.c_attn.weight"), W("attn.c_attn.bias"), N, D, 3 * D);
    reference_attention(att, qkv.data(), 3 * D, qkv.data() + D, qkv.data() + 2 * D, 3 * D, mb, NH, NH, hs, &c, l);
    conv1d(tmp, att, W("attn.c_proj.weight"), W("attn.c_proj.bias"), N, D, D);
    reference_hidden_dropout(tmp, c, mb, l, kernels::DropoutSite::kAttentionOutput, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    layernorm(ln, x, W("ln_2.weight"), W("ln_2.bias"), N, D, eps);
    conv1d(h, ln, W("mlp.c_fc.weight"), W("mlp.c_fc.bias"), N, D, F);
    for (double& v : h) v = gelu(v);
    conv1d(tmp, h, W("mlp.c_proj.weight"), W("mlp.c_proj.bias"), N, F, D);
    reference_hidden_dropout(tmp, c, mb, l, kernels::DropoutSite::kMlpOutput, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
  }

  if (!reg.range().has_head(c)) {
    out.output = x;
    return out;
  }
  layernorm(ln, x, P + reg.at("ln_f.weight").offset, P + reg.at("ln_f.bias").offset, N, D, eps);
  reference_head_loss(out, ln, P + reg.head_offset(), mb, N, D, V);
  return out;
}

void reference_attention(std::vector<double>& y, const double* q, int64_t q_stride, const double* k,
                         const double* v, int64_t kv_stride, const data::Microbatch& mb, int NH, int KV, int hs,
                         const Config* c, int layer) {
  const int B = mb.batch, T = mb.seq, group = NH / KV;
  y.assign(size_t(B) * T * NH * hs, 0.0);
  kernels::DropoutMask drop;
  if (c && mb.first_slot >= 0)
    drop = kernels::make_dropout_mask(c->model().attention_dropout(),
                                      kernels::dropout_key(c->training().seed(), layer,
                                                           kernels::DropoutSite::kAttentionProbs),
                                      mb.first_slot, 0);
  auto keep = [&](int b, int hh, int t, int s) {
    if (!drop.on()) return 1.0;
    return kernels::dropout_keep(drop, kernels::head_key(drop.key, hh), drop.first_slot + b, t, s) ? double(drop.scale)
                                                                                                    : 0.0;
  };
  for (int b = 0; b < B; ++b)
    for (int hh = 0; hh < NH; ++hh)
      for (int t = 0; t < T; ++t) {
        const size_t qt = size_t(b * T + t);
        const int64_t qo = hh * hs, ko = (hh / group) * hs;
        // causal within the document: s <= t, same segment
        std::vector<double> w(size_t(t) + 1, 0.0);
        double mx = -1e300;
        for (int s = 0; s <= t; ++s) {
          if (mb.segments[size_t(b * T + s)] != mb.segments[qt]) continue;
          double dot = 0;
          for (int e = 0; e < hs; ++e) dot += q[qt * q_stride + qo + e] * k[size_t(b * T + s) * kv_stride + ko + e];
          w[size_t(s)] = dot / std::sqrt(double(hs));
          mx = std::max(mx, w[size_t(s)]);
        }
        double z = 0;
        for (int s = 0; s <= t; ++s) {
          if (mb.segments[size_t(b * T + s)] != mb.segments[qt]) {
            w[size_t(s)] = 0;
            continue;
          }
          w[size_t(s)] = std::exp(w[size_t(s)] - mx);
          z += w[size_t(s)];
        }
        for (int e = 0; e < hs; ++e) {
          double acc = 0;
          for (int s = 0; s <= t; ++s)
            acc += w[size_t(s)] / z * keep(b, hh, t, s) * v[size_t(b * T + s) * kv_stride + ko + e];
          y[qt * NH * hs + size_t(qo + e)] = acc;
        }
      }
}

void reference_head_loss(ReferenceOutput& out, const std::vector<double>& x, const double* head,
                         const data::Microbatch& mb, int N, int D, int V) {
  out.logits.assign(size_t(N) * V, 0.0);
  out.token_losses.assign(size_t(N), 0.0);
  for (int n = 0; n < N; ++n) {
    double mx = -1e300;
    for (int j = 0; j < V; ++j) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += x[size_t(n) * D + d] * head[size_t(j) * D + d];
      out.logits[size_t(n) * V + j] = s;
      mx = std::max(mx, s);
    }
    if (mb.loss_mask[size_t(n)] == 0.0f) continue;
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(out.logits[size_t(n) * V + j] - mx);
    const double loss = mx + std::log(z) - out.logits[size_t(n) * V + mb.targets[size_t(n)]];
    out.token_losses[size_t(n)] = loss;
    out.loss_sum += loss;
  }
}

double central_difference(const Config& c, const model::ParameterRegistry& reg, std::vector<double>& params,
                          const std::vector<data::Microbatch>& mbs, size_t idx, double h) {
  const double saved = params[idx];
  params[idx] = saved + h;
  const double up = reference_loss(c, reg, params, mbs);
  params[idx] = saved - h;
  const double down = reference_loss(c, reg, params, mbs);
  params[idx] = saved;
  return (up - down) / (2 * h);
}

double reference_loss(const Config& c, const model::ParameterRegistry& reg, const std::vector<double>& params,
                      const std::vector<data::Microbatch>& mbs, const std::vector<std::vector<double>>* inputs) {
  double sum = 0;
  for (size_t i = 0; i < mbs.size(); ++i)
    sum += reference_forward(c, reg, params, mbs[i], inputs ? &(*inputs)[i] : nullptr).loss_sum;
  return sum / double(mbs.front().global_loss_tokens);
}

}  // namespace troupe::testing
