#include "kernels/cuda/timed_device.h"

namespace troupe::kernels::cuda {

template <class F>
void TimedDevice::timed(const char* category, F&& f) {
  if (!enabled_) {
    f();
    return;
  }
  Event start = inner_.record_event(Stream::kCompute, true);
  f();
  spans_.push_back({category, start, inner_.record_event(Stream::kCompute, true)});
}

std::map<std::string, double> TimedDevice::collect() {
  inner_.synchronize();
  std::map<std::string, double> ms;
  for (const Span& s : spans_) ms[s.category] += double(s.end.elapsed_ms_since(s.start));
  spans_.clear();
  return ms;
}

void TimedDevice::copy(void* dst, const void* src, size_t bytes) {
  timed("copies and fills", [&] { inner_.copy(dst, src, bytes); });
}
void TimedDevice::copy_from_host(void* dst, const void* src, size_t bytes) {
  timed("host transfers", [&] { inner_.copy_from_host(dst, src, bytes); });
}
void TimedDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  timed("host transfers", [&] { inner_.copy_to_host(dst, src, bytes); });
}
void TimedDevice::copy_to_host_async(void* dst, const void* src, size_t bytes) {
  timed("host transfers", [&] { inner_.copy_to_host_async(dst, src, bytes); });
}
void TimedDevice::copy_from_host_async(void* dst, const void* src, size_t bytes) {
  timed("host transfers", [&] { inner_.copy_from_host_async(dst, src, bytes); });
}
void TimedDevice::fill_zero(void* dst, size_t bytes) {
  timed("copies and fills", [&] { inner_.fill_zero(dst, bytes); });
}
void TimedDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                       int ldb, float beta, float* C, int ldc) {
  timed("gemm (LM head)", [&] { inner_.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}
void TimedDevice::embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                                    const float* wpe, int N, int C) {
  timed("embedding", [&] { inner_.embedding_forward(out, tokens, positions, wte, wpe, N, C); });
}
void TimedDevice::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                     const int32_t* positions, int N, int C) {
  timed("embedding", [&] { inner_.embedding_backward(dwte, dwpe, dout, tokens, positions, N, C); });
}
void TimedDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int N, int C, float eps) {
  timed("layernorm", [&] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps); });
}
void TimedDevice::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int N, int C) {
  timed("layernorm", [&] { inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
}
void TimedDevice::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                  float eps) {
  timed("rmsnorm", [&] { inner_.rmsnorm_forward(out, rstd, inp, weight, N, C, eps); });
}
void TimedDevice::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                   const float* weight, const float* rstd, int N, int C) {
  timed("rmsnorm", [&] { inner_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C); });
}
void TimedDevice::rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N,
                               int heads, int hs, int64_t ld) {
  timed("rope", [&] { inner_.rope_forward(x, positions, cos, sin, N, heads, hs, ld); });
}
void TimedDevice::rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                                int heads, int hs, int64_t ld) {
  timed("rope", [&] { inner_.rope_backward(dx, positions, cos, sin, N, heads, hs, ld); });
}
void TimedDevice::swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  timed("elementwise", [&] { inner_.swiglu_forward(out, gate, up, n); });
}
void TimedDevice::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  int64_t n) {
  timed("elementwise", [&] { inner_.swiglu_backward(dgate, dup, dout, gate, up, n); });
}
void TimedDevice::gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B,
                                        int T, int NH, int KV, int hs, const DropoutMask& drop) {
  timed("attention forward", [&] { inner_.gqa_attention_forward(out, att, qkv, doc_start, B, T, NH, KV, hs, drop); });
}
void TimedDevice::gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                         const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                                         const DropoutMask& drop) {
  timed("attention backward",
        [&] { inner_.gqa_attention_backward(dqkv, dout, qkv, att, doc_start, B, T, NH, KV, hs, drop); });
}
void TimedDevice::dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols,
                          int T, const DropoutMask& drop) {
  timed("elementwise", [&] { inner_.dropout(out, in, add, first_row, rows, cols, T, drop); });
}
void TimedDevice::linear_forward(float* out, float* gelu_out, const float* inp, const float* weight, const float* bias,
                                 const float* residual, int N, int C, int OC) {
  timed("linear forward", [&] { inner_.linear_forward(out, gelu_out, inp, weight, bias, residual, N, C, OC); });
}
void TimedDevice::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* gelu_pre, int N, int C, int OC) {
  timed("linear backward", [&] { inner_.linear_backward(dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, C, OC); });
}
void TimedDevice::attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T,
                                    int C, int NH, const DropoutMask& drop) {
  timed("attention forward", [&] { inner_.attention_forward(out, att, qkv, doc_start, B, T, C, NH, drop); });
}
void TimedDevice::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                     const int32_t* doc_start, int B, int T, int C, int NH, const DropoutMask& drop) {
  timed("attention backward", [&] { inner_.attention_backward(dqkv, dout, qkv, att, doc_start, B, T, C, NH, drop); });
}
void TimedDevice::gelu_forward(float* out, const float* inp, int64_t n) {
  timed("elementwise", [&] { inner_.gelu_forward(out, inp, n); });
}
void TimedDevice::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  timed("elementwise", [&] { inner_.gelu_backward(dinp, inp, dout, n); });
}
void TimedDevice::add(float* out, const float* a, const float* b, int64_t n) {
  timed("elementwise", [&] { inner_.add(out, a, b, n); });
}
void TimedDevice::scale(float* x, int64_t n, float s) {
  timed("elementwise", [&] { inner_.scale(x, n, s); });
}
void TimedDevice::crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                       const float* mask, int N, int V, int ld) {
  timed("cross-entropy", [&] { inner_.crossentropy_forward(losses, lse, logits, targets, mask, N, V, ld); });
}
void TimedDevice::crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                        const float* mask, float scale, int N, int V, int ld) {
  timed("cross-entropy", [&] { inner_.crossentropy_backward(dlogits, logits, lse, targets, mask, scale, N, V, ld); });
}
void TimedDevice::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args) {
  timed("adamw", [&] { inner_.adamw_update(param, grad, m, v, n, args); });
}
void TimedDevice::adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                                     const AdamWArgs& args, double* update_sq, double* weight_sq) {
  timed("adamw", [&] { inner_.adamw_update_norms(param, grad, m, v, n, args, update_sq, weight_sq); });
}
void TimedDevice::sum_squares_to_host(double* dst, const float* x, int64_t n) {
  timed("grad norm", [&] { inner_.sum_squares_to_host(dst, x, n); });
}
double TimedDevice::sum_squares(const float* x, int64_t n) {
  double r = 0;
  timed("grad norm", [&] { r = inner_.sum_squares(x, n); });
  return r;
}

}  // namespace troupe::kernels::cuda
