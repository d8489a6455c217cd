// The double-precision Llama forward of reference_forward (reference_forward.h),
// written from Hugging Face's LlamaForCausalLM semantics with naive loops: RMSNorm,
// nn.Linear weights [out, in], rotary positions with the rotate-half pairing
// (positions restart at each document), grouped-query attention causal within the
// document, SwiGLU, untied or tied head.
#include <cmath>
#include <numbers>

#include "config/derived.h"
#include "test/model/reference_forward.h"

namespace troupe::testing {
namespace {

using Vec = std::vector<double>;

void rmsnorm(Vec& out, const Vec& x, const double* w, int N, int C, double eps) {
  out.assign(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* r = &x[size_t(n) * C];
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += r[c] * r[c];
    const double s = 1.0 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = r[c] * s * w[c];
  }
}

// out[N, OC] = x[N, C] W^T, W [OC, C] (nn.Linear)
void linear(Vec& out, const Vec& x, const double* W, int N, int C, int OC) {
  out.assign(size_t(N) * OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += x[size_t(n) * C + c] * W[size_t(o) * C + c];
      out[size_t(n) * OC + o] = s;
    }
}

// Hugging Face's inverse frequencies, with rope_type "llama3" when factor > 0.
Vec inverse_frequencies(const ModelConfig& m, int hs) {
  Vec f;
  for (int i = 0; i < hs; i += 2) f.push_back(1.0 / std::pow(m.rope_theta(), double(i) / hs));
  if (!m.has_rope_scaling() || m.rope_scaling().factor() == 0) return f;
  const auto& r = m.rope_scaling();
  const double old = r.original_max_positions();
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > old / r.low_freq_factor()) {
      x = x / r.factor();
    } else if (wavelen >= old / r.high_freq_factor()) {
      const double smooth = (old / wavelen - r.low_freq_factor()) / (r.high_freq_factor() - r.low_freq_factor());
      x = (1 - smooth) * x / r.factor() + smooth * x;
    }
  }
  return f;
}

// rotate_half: x * cos + [-x2, x1] * sin per head, the angle of position p and pair i.
void rotate(double* head, int hs, int p, const Vec& f) {
  const int half = hs / 2;
  for (int i = 0; i < half; ++i) {
    const double a = head[i], b = head[i + half], ang = p * f[size_t(i)];
    head[i] = a * std::cos(ang) - b * std::sin(ang);
    head[i + half] = b * std::cos(ang) + a * std::sin(ang);
  }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

ReferenceOutput llama_reference_forward(const Config& c, const model::ParameterRegistry& reg,
                                        const std::vector<double>& params, const data::Microbatch& mb,
                                        const std::vector<double>* input) {
  const auto& m = c.model();
  const int B = mb.batch, T = mb.seq, N = B * T;
  // hs: model.head_dim when set (LlamaConfig's head_dim), else D / NH.
  const int D = m.width(), NH = m.heads(), KV = int(config::kv_heads(m));
  const int hs = m.head_dim() > 0 ? m.head_dim() : D / NH;
  const int F = int(config::ffn_width(m)), V = m.vocab_size();
  const double eps = config::norm_eps(m);
  const double* P = params.data();
  const Vec freq = inverse_frequencies(m, hs);
  ReferenceOutput out;

  Vec x(size_t(N) * D);
  if (reg.range().has_embedding()) {
    const double* E = P + reg.at("model.embed_tokens.weight").offset;
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) x[size_t(n) * D + d] = E[size_t(mb.tokens[size_t(n)]) * D + d];
    reference_hidden_dropout(x, c, mb, 0, kernels::DropoutSite::kEmbedding, D);
  } else {
    x = *input;
  }

  Vec h, q, k, v, y, o, gate, up;
  for (int l = reg.range().first_layer; l < reg.range().last_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto W = [&](const char* name) { return P + reg.at(p + name).offset; };
    rmsnorm(h, x, W("input_layernorm.weight"), N, D, eps);
    linear(q, h, W("self_attn.q_proj.weight"), N, D, NH * hs);
    linear(k, h, W("self_attn.k_proj.weight"), N, D, KV * hs);
    linear(v, h, W("self_attn.v_proj.weight"), N, D, KV * hs);
    for (int n = 0; n < N; ++n) {
      for (int hh = 0; hh < NH; ++hh) rotate(&q[size_t(n) * NH * hs + size_t(hh) * hs], hs, mb.positions[size_t(n)], freq);
      for (int g = 0; g < KV; ++g) rotate(&k[size_t(n) * KV * hs + size_t(g) * hs], hs, mb.positions[size_t(n)], freq);
    }
    reference_attention(y, q.data(), NH * hs, k.data(), v.data(), KV * hs, mb, NH, KV, hs, &c, l);
    linear(o, y, W("self_attn.o_proj.weight"), N, NH * hs, D);
    reference_hidden_dropout(o, c, mb, l, kernels::DropoutSite::kAttentionOutput, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    rmsnorm(h, x, W("post_attention_layernorm.weight"), N, D, eps);
    linear(gate, h, W("mlp.gate_proj.weight"), N, D, F);
    linear(up, h, W("mlp.up_proj.weight"), N, D, F);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
    linear(o, gate, W("mlp.down_proj.weight"), N, F, D);
    reference_hidden_dropout(o, c, mb, l, kernels::DropoutSite::kMlpOutput, D);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  }

  if (!reg.range().has_head(c)) {
    out.output = x;
    return out;
  }
  rmsnorm(h, x, P + reg.at("model.norm.weight").offset, N, D, eps);
  reference_head_loss(out, h, P + reg.at(m.tied_embeddings() ? "model.embed_tokens.weight" : "lm_head.weight").offset,
                      mb, N, D, V);
  return out;
}

}  // namespace troupe::testing
