// A CPU device that completes like a GPU, for testing the runtime's non-blocking
// reads without one. Kernels run at once on the calling thread (a one-thread CPU
// device inside), but what a GPU finishes later happens later here too: the reads
// issued without waiting (copy_to_host_async, sum_squares_to_host) land in host memory,
// and when_done fns run, in issue order on a thread of this device, each `lag` after
// its call, never on the caller's thread. So a read of host memory before its
// when_done fn sees stale values, and a fn that touches its actor's state races with
// the actor. It reports kind() kCuda, so the runtime treats its memory as device memory.
//
// The calls that wait for a GPU (synchronize, copy_to_host, sum_squares) wait for that
// queue to drain first, and are counted: waits() is what the runtime still blocks on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "kernels/cpu/cpu_device.h"

namespace troupe::testing {

class LateCompletionDevice final : public kernels::Device {
 public:
  struct Waits {
    int64_t synchronize = 0, copy_to_host = 0, sum_squares = 0;
    int64_t total() const { return synchronize + copy_to_host + sum_squares; }
  };

  explicit LateCompletionDevice(std::chrono::microseconds lag);
  // Runs what is still queued, then stops the thread.
  ~LateCompletionDevice() override;

  Waits waits() const;

  kernels::DeviceKind kind() const override { return kernels::DeviceKind::kCuda; }
  std::string describe() const override { return "CPU device with GPU-like late completion (test)"; }
  kernels::Buffer allocate(int64_t count, kernels::DType dtype) override { return inner_.allocate(count, dtype); }
  void release(void* data) override { inner_.release(data); }
  kernels::MemoryLedger& memory() override { return inner_.memory(); }
  void copy(void* dst, const void* src, size_t bytes) override { inner_.copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { inner_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override { inner_.fill_zero(dst, bytes); }
  void synchronize() override;
  void when_done(std::function<void()> fn) override { enqueue(std::move(fn)); }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override;
  void sum_squares_to_host(double* dst, const float* x, int64_t n) override;
  void sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                 const std::vector<int64_t>& piece_ends) override;
  // At once: a GPU copies in stream order, before the kernels issued after it (src
  // must stay unchanged until a later when_done fn either way).
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override {
    inner_.copy_from_host(dst, src, bytes);
  }

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) override {
    inner_.gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                         const float* wpe, int N, int C) override {
    inner_.embedding_forward(out, tokens, positions, wte, wpe, N, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          const int32_t* positions, int N, int C) override {
    inner_.embedding_backward(dwte, dwpe, dout, tokens, positions, N, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C, float eps) override {
    inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  // The optional primitives (the Llama family).
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override {
    inner_.rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override {
    inner_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                    int64_t ld) override {
    inner_.rope_forward(x, positions, cos, sin, N, heads, hs, ld);
  }
  void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N, int heads,
                     int hs, int64_t ld) override {
    inner_.rope_backward(dx, positions, cos, sin, N, heads, hs, ld);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
    inner_.swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       int64_t n) override {
    inner_.swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T, int NH,
                             int KV, int hs, const kernels::DropoutMask& drop) override {
    inner_.gqa_attention_forward(out, att, qkv, doc_start, B, T, NH, KV, hs, drop);
  }
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                              const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                              const kernels::DropoutMask& drop) override {
    inner_.gqa_attention_backward(dqkv, dout, qkv, att, doc_start, B, T, NH, KV, hs, drop);
  }
  void dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols, int T,
               const kernels::DropoutMask& drop) override {
    inner_.dropout(out, in, add, first_row, rows, cols, T, drop);
  }
  void linear_forward(float* out, float* gelu_out, const float* inp, const float* weight, const float* bias,
                      const float* residual, int N, int C, int OC) override {
    inner_.linear_forward(out, gelu_out, inp, weight, bias, residual, N, C, OC);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, const float* gelu_pre, int N, int C, int OC) override {
    inner_.linear_backward(dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, C, OC);
  }
  void attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T, int C,
                         int NH, const kernels::DropoutMask& drop) override {
    inner_.attention_forward(out, att, qkv, doc_start, B, T, C, NH, drop);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          const int32_t* doc_start, int B, int T, int C, int NH,
                          const kernels::DropoutMask& drop) override {
    inner_.attention_backward(dqkv, dout, qkv, att, doc_start, B, T, C, NH, drop);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override { inner_.gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    inner_.gelu_backward(dinp, inp, dout, n);
  }
  void add(float* out, const float* a, const float* b, int64_t n) override { inner_.add(out, a, b, n); }
  void scale(float* x, int64_t n, float s) override { inner_.scale(x, n, s); }
  void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                            const float* mask, int N, int V, int ld) override {
    inner_.crossentropy_forward(losses, lse, logits, targets, mask, N, V, ld);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                             const float* mask, float scale, int N, int V, int ld) override {
    inner_.crossentropy_backward(dlogits, logits, lse, targets, mask, scale, N, V, ld);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const kernels::AdamWArgs& args) override {
    inner_.adamw_update(param, grad, m, v, n, args);
  }
  // The update at once, its sums landing late (like sum_squares_to_host).
  void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                          const kernels::AdamWArgs& args, double* update_sq, double* weight_sq) override;
  double sum_squares(const float* x, int64_t n) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Item {
    Clock::time_point due;
    std::function<void()> fn;
  };
  // Shared with the thread, which may outlive this object: a fn can hold the last
  // handle of the device it runs on (the thread then lets itself go).
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> items;
    bool running = false;  // an item is being run
    bool stop = false;
  };
  void enqueue(std::function<void()> fn);
  // Returns when everything queued so far has run.
  void drain();
  // A call that waits for the device: drains the queue and counts it.
  void wait(int64_t Waits::*counter);
  static void run(std::shared_ptr<Queue> q);

  kernels::cpu::CpuDevice inner_{1};
  std::chrono::microseconds lag_;
  std::shared_ptr<Queue> queue_;
  std::thread thread_;
  mutable std::mutex waits_mu_;
  Waits waits_;
};

}  // namespace troupe::testing
