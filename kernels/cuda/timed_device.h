// A Device that forwards every call to a CudaDevice and, while enabled, brackets each
// call with timing events on the compute stream, so the time the GPU spends in each
// kind of kernel can be read afterwards (per-kernel time shares in bench/gpu_bench).
// Disabled, it adds one virtual call and nothing else. Memory comes from the inner
// device (buffers it hands out are released there).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace troupe::kernels::cuda {

class TimedDevice final : public Device {
 public:
  explicit TimedDevice(CudaDevice& inner) : inner_(inner) {}

  CudaDevice& inner() { return inner_; }
  void enable(bool on) { enabled_ = on; }
  // Waits for the device, then returns milliseconds per category for the calls made
  // while enabled since the last collect(), and forgets them.
  std::map<std::string, double> collect();

  DeviceKind kind() const override { return inner_.kind(); }
  std::string describe() const override { return inner_.describe() + " (timed)"; }
  Buffer allocate(int64_t count, DType dtype) override { return inner_.allocate(count, dtype); }
  void release(void* data) override { inner_.release(data); }
  MemoryLedger& memory() override { return inner_.memory(); }
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override { inner_.synchronize(); }
  void when_done(std::function<void()> fn) override { inner_.when_done(std::move(fn)); }
  std::shared_ptr<void> allocate_host(size_t bytes) override { return inner_.allocate_host(bytes); }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override;
  void sum_squares_to_host(double* dst, const float* x, int64_t n) override;
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override;
  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override;
  void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                         const float* wpe, int N, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          const int32_t* positions, int N, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C, float eps) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;
  // The optional primitives (the Llama family), forwarded like the rest.
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override;
  void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                    int64_t ld) override;
  void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N, int heads,
                     int hs, int64_t ld) override;
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override;
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       int64_t n) override;
  void gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T, int NH,
                             int KV, int hs, const DropoutMask& drop) override;
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                              const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                              const DropoutMask& drop) override;
  void dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols, int T,
               const DropoutMask& drop) override;
  void linear_forward(float* out, float* gelu_out, const float* inp, const float* weight, const float* bias,
                      const float* residual, int N, int C, int OC) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* gelu_pre, int N, int C, int OC) override;
  void attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T, int C,
                         int NH, const DropoutMask& drop) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          const int32_t* doc_start, int B, int T, int C, int NH, const DropoutMask& drop) override;
  void gelu_forward(float* out, const float* inp, int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void add(float* out, const float* a, const float* b, int64_t n) override;
  void scale(float* x, int64_t n, float s) override;
  void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                            const float* mask, int N, int V, int ld) override;
  void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                             const float* mask, float scale, int N, int V, int ld) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const AdamWArgs& args) override;
  void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args,
                          double* update_sq, double* weight_sq) override;
  double sum_squares(const float* x, int64_t n) override;

 private:
  template <class F>
  void timed(const char* category, F&& f);

  CudaDevice& inner_;
  bool enabled_ = false;
  struct Span {
    const char* category;
    Event start, end;
  };
  std::vector<Span> spans_;
};

}  // namespace troupe::kernels::cuda
