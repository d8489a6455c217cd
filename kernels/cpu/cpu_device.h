// The CPU device: fp32 kernels on a private thread pool, GEMMs through OpenBLAS.
//
// Threads: the device owns `threads` compute participants (the calling thread plus
// threads-1 workers). OpenBLAS runs single-threaded process-wide and the device
// splits each GEMM over its own participants (see cpu/gemm.h), so several devices
// in one process (one per stage actor) never fight over OpenBLAS's global thread
// setting. Give each concurrently running device its share of the cores.
//
// Determinism: identical inputs and thread count give identical bits. Every kernel
// other than gemm (and the layers built on it: linear_*) is also independent of the
// thread count (see cpu/kernels.h).
//
// Memory: allocate() returns zeroed, 64-byte-aligned host memory; kernels allocate
// nothing, except scratch that grows once to the largest seen: 2 T^2 floats per
// participant (attention; grouped-query attention needs T^2) and one double per
// 64 Ki elements (sum_squares).
#pragma once

#include <memory>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/device.h"

namespace troupe::kernels::cpu {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads = 1);

  int threads() const { return pool_.size(); }
  ThreadPool& pool() { return pool_; }

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string describe() const override;

  Buffer allocate(int64_t count, DType dtype) override;
  void release(void* data) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;

  void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                         const float* wte, const float* wpe, int N, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          const int32_t* positions, int N, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C,
                         float eps) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int N, int C) override;
  // The Llama family's primitives (cpu/rope.cpp, cpu/swiglu.cpp, cpu/gqa_attention.cpp).
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
  void linear_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                      const float* bias, const float* residual, int N, int C, int OC) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* gelu_pre, int N,
                       int C, int OC) override;
  void attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start,
                         int B, int T, int C, int NH, const DropoutMask& drop) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          const int32_t* doc_start, int B, int T, int C, int NH, const DropoutMask& drop) override;
  void gelu_forward(float* out, const float* inp, int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void add(float* out, const float* a, const float* b, int64_t n) override;
  void scale(float* x, int64_t n, float s) override;
  void crossentropy_forward(float* losses, float* lse, const float* logits,
                            const int32_t* targets, const float* mask, int N, int V,
                            int ld) override;
  void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                             const int32_t* targets, const float* mask, float scale, int N,
                             int V, int ld) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const AdamWArgs& args) override;
  void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args,
                          double* update_sq, double* weight_sq) override;
  void adamw_update_pieces(float* param, const float* grad, float* m, float* v, const std::vector<AdamWPiece>& pieces,
                           const AdamWArgs& args) override;
  double sum_squares(const float* x, int64_t n) override;
  void sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                 const std::vector<int64_t>& piece_ends) override;

  // Vocabulary-parallel pieces (defined in cpu/vocab_shard.cpp).
  void embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions,
                               const float* wte, const float* wpe, int N, int C, int vocab_begin,
                               int vocab_rows) override;
  void embedding_backward_shard(float* dwte, float* dwpe, const float* dout,
                                const int32_t* tokens, const int32_t* positions, int N, int C,
                                int vocab_begin, int vocab_rows) override;
  void crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                             const float* mask, int N, int V, int ld, int vocab_begin) override;
  void crossentropy_combine(float* losses, float* lse, const float* partials, int S,
                            const float* mask, int N) override;
  void crossentropy_backward_shard(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, const float* mask, float scale, int N,
                                   int V, int ld, int vocab_begin) override;

  // Memory accounting (memory(): kernels/memory_ledger.h): each allocate() block at
  // the bytes asked for (it is rounded up to 64 bytes), and the kernel scratch (attention rows, sum_squares
  // partials: std::vectors that only grow) as one kScratch entry, accounted again
  // right after each kernel that may have grown it. scratch_bytes() is that kernel
  // scratch (read without a lock: call it while no kernel of this device runs).
  int64_t allocated_blocks() const;  // allocate() blocks alive now
  int64_t scratch_bytes() const;

 private:
  ThreadPool pool_;
  Scratch scratch_;
  int64_t scratch_accounted_ = 0;  // kernel scratch bytes memory() holds
  // Re-accounts the kernel scratch when a kernel grew it (the calling thread, after the kernel).
  void account_kernel_scratch();
};

}  // namespace troupe::kernels::cpu
