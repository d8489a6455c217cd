// The CUDA device: kernels::Device on one GPU, with a compute stream and a
// communication stream, cuBLAS for every GEMM and the .cu kernels for the rest.
//
// Precision (docs/numerics.md, "Precision"; docs/gpu.md has the full table). The interface is
// fp32, and so is every buffer this device allocates: parameters (the fp32 master
// weights), gradients (fp32 accumulation), Adam moments and saved activations.
// With GemmType::kBf16 (the default) every GEMM -- the linear layers, the LM head,
// Q K^T and P V in attention and all their backward products -- rounds both
// operands to bf16 (round to nearest even) in scratch and multiplies them on the
// tensor cores with fp32 accumulation into an fp32 result, which is where bf16
// weights and activations enter the arithmetic. LayerNorm, RMSNorm, RoPE, SwiGLU, softmax, GELU,
// cross-entropy, AdamW and the norm run in fp32. GemmType::kF32 keeps the operands
// in fp32 (CUBLAS_COMPUTE_32F_PEDANTIC, no TF32): the whole device then computes
// the CPU device's function in fp32, which the tests use to check the plumbing at
// fp32 tolerance separately from bf16 rounding.
//
// Streams and completion. Every kernel of the Device interface is enqueued on the
// compute stream and returns at once, except the calls that hand data to the host
// (copy_to_host, sum_squares, and copy_from_host of more than kStagedUploadBytes),
// which wait for the compute stream;
// copy_to_host_async and sum_squares_to_host write page-locked host memory without
// waiting (read it from a when_done callback).
// record_event() marks a point in a stream; Event::done() polls it and on_complete()
// runs a host callback once the stream reaches it, so an actor can turn GPU
// completion into a message instead of blocking. wait_event() makes one stream wait
// for a point in the other (compute -> communication for a gradient bucket, and
// back) without the host waiting.
//
// Determinism: no atomics anywhere; reductions use fixed trees; cuBLAS runs with a
// fixed workspace on one stream. Identical inputs on the same GPU model and build give
// identical bits.
//
// Memory: allocate() is cudaMalloc (zero-filled on the compute stream). Kernels
// grow private scratch (bf16 operand copies, attention intermediates, sort buffers)
// to the largest size seen and keep it; steady-state steps allocate nothing.
// One thread at a time may use a CudaDevice (the Device contract); on_complete
// callbacks run on a CUDA runtime thread.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/device.h"

namespace troupe::kernels::cuda {

class Blas;

// True when a CUDA device is present and this build's kernels can run on it;
// otherwise false with the reason in *why (e.g. "cudaGetDeviceCount: error 35
// cudaErrorInsufficientDriver: ..." on a machine without a driver).
bool gpu_available(std::string* why = nullptr);
// CUDA devices visible to this process (0 when none or no driver).
int device_count();

enum class Stream { kCompute, kComm };

// A recorded point in a stream (shared handle; copies refer to the same event).
class Event {
 public:
  Event() = default;
  bool valid() const { return impl_ != nullptr; }
  // True once every operation issued to the stream before the record has finished.
  bool done() const;
  // Blocks the calling thread until done().
  void wait() const;
  // Milliseconds between `start` and this event (both recorded with timing).
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const;

 private:
  friend class CudaDevice;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct CudaDeviceOptions {
  int device = 0;                             // CUDA device ordinal
  GemmType gemm = GemmType::kBf16;            // GEMM operand precision (see above)
  size_t cublas_workspace = size_t(32) << 20; // bytes
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(CudaDeviceOptions options = {});
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const { return options_.device; }
  GemmType gemm_type() const { return options_.gemm; }
  cudaStream_t stream(Stream s) const { return s == Stream::kCompute ? compute_ : comm_; }

  // ---- completion ---------------------------------------------------------------
  Event record_event(Stream s = Stream::kCompute, bool timing = false);
  // Stream s waits (on the device) until e is reached; the host does not block.
  void wait_event(Stream s, const Event& e);
  // fn runs on a CUDA runtime thread once stream s has finished everything issued so
  // far. fn must not call CUDA (send a message, set a flag); exceptions are swallowed.
  void on_complete(std::function<void()> fn, Stream s = Stream::kCompute);

  // ---- Device -------------------------------------------------------------------
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string describe() const override;

  Buffer allocate(int64_t count, DType dtype = DType::kF32) override;
  void release(void* data) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  // Up to kStagedUploadBytes: the bytes go into a page-locked staging block, which the
  // compute stream copies to dst, and the call returns at once (a microbatch's token
  // IDs and mask, five calls per forward, never wait for the device). A block is
  // reused once its copy is done; while every block is still in flight a new one is
  // added, up to kMaxUploadBlocks, and only then does the call wait for the oldest.
  // Larger copies wait for the compute stream.
  static constexpr size_t kStagedUploadBytes = size_t(4) << 20;
  static constexpr size_t kMaxUploadBlocks = 256;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override;
  // fn runs once both streams have done everything issued so far (on_complete on the
  // compute stream after it waited for the communication stream).
  void when_done(std::function<void()> fn) override;
  // Page-locked host memory (cudaMallocHost); the reads below are cudaMemcpyAsync on
  // the compute stream into it. A when_done fn may hold the last handle, and a host
  // callback must not call CUDA: a block whose handle goes while this device lives is
  // freed by the device (at its next allocate_host, or when it is destroyed).
  std::shared_ptr<void> allocate_host(size_t bytes) override;
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override;
  void sum_squares_to_host(double* dst, const float* x, int64_t n) override;
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override;

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;

  void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                         const float* wte, const float* wpe, int N, int C) override;
  void embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                               const float* wpe, int N, int C, int vocab_begin, int vocab_rows) override;
  void embedding_backward_shard(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                const int32_t* positions, int N, int C, int vocab_begin, int vocab_rows) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          const int32_t* positions, int N, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C,
                         float eps) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override;
  // The Llama family's primitives: RMSNorm, RoPE and SwiGLU in fp32 (cuda_llama.cpp);
  // grouped-query attention as attention's batched GEMMs (cuda_gqa_attention.cpp).
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
  double sum_squares(const float* x, int64_t n) override;

  // ---- vocabulary-parallel cross-entropy pieces (see launch.h) -------------------
  // A tensor-parallel rank holding vocabulary columns [vocab_begin, vocab_begin + V)
  // computes partials[3, N]; the group exchanges them (all-gather of 3N floats, in
  // rank order) and each rank combines the S shards' partials[S, 3, N] into lse and
  // the loss; the backward then needs only the rank's own columns and lse.
  void crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                             const float* mask, int N, int V, int ld, int vocab_begin);
  void crossentropy_combine(float* losses, float* lse, const float* partials, int S,
                            const float* mask, int N);
  void crossentropy_backward_shard(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, const float* mask, float scale, int N,
                                   int V, int ld, int vocab_begin);

 private:
  // Named scratch regions, each grown on demand and kept (see "Memory" above).
  enum Slot : int { kOperandA, kOperandB, kOperandC, kAttnBig1, kAttnBig2, kAttnBig3, kAttnRows, kReduce, kSort, kSlots };
  void* scratch(Slot slot, size_t bytes);
  // op(X) stored as rows x cols with row stride ld -> a GEMM operand of gemm_type():
  // bf16 copy in scratch `slot` (packed, ld = cols), or X itself for fp32.
  const void* operand(Slot slot, const float* X, int64_t rows, int64_t cols, int64_t ld, int64_t* ld_out);
  void gemm_rm(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int64_t lda, int64_t sa,
               const void* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc,
               int batch);
  void make_current() const;
  void release_all() noexcept;  // the destructor's work; safe on a half-built device

  CudaDeviceOptions options_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  std::unique_ptr<Blas> blas_;
  struct Region {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Region regions_[kSlots];
  double* result_device_ = nullptr;  // sum_squares result
  double* result_host_ = nullptr;    // pinned
  // copy_from_host's page-locked staging (see there): a ring of blocks, oldest at
  // next_upload_, each with the event of its last copy to the device.
  struct Upload {
    std::shared_ptr<void> host;
    size_t bytes = 0;
    Event copied;
  };
  // Guarded although a device has one user at a time: a rank's stage and optimizer
  // shard restore a checkpoint concurrently as they start, each uploading through it.
  std::mutex upload_mu_;
  std::vector<Upload> uploads_;
  size_t next_upload_ = 0;
  // Page-locked blocks whose handles went (see allocate_host), shared with the handles.
  struct ReleasedHost;
  std::shared_ptr<ReleasedHost> released_host_;
  void free_released_host() noexcept;
  std::string name_;
};

}  // namespace troupe::kernels::cuda
