#include "kernels/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_check.h"

namespace troupe::kernels::cuda {

// ---- Event ------------------------------------------------------------------------

struct Event::Impl {
  cudaEvent_t ev = nullptr;
  ~Impl() {
    if (ev) cudaEventDestroy(ev);
  }
};

bool Event::done() const {
  if (!impl_) throw std::logic_error("Event::done on an empty event");
  const cudaError_t e = cudaEventQuery(impl_->ev);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TROUPE_CUDA_CHECK(e);
  return false;
}

void Event::wait() const {
  if (!impl_) throw std::logic_error("Event::wait on an empty event");
  TROUPE_CUDA_CHECK(cudaEventSynchronize(impl_->ev));
}

float Event::elapsed_ms_since(const Event& start) const {
  if (!impl_ || !start.impl_) throw std::logic_error("Event::elapsed_ms_since on an empty event");
  float ms = 0;
  TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start.impl_->ev, impl_->ev));
  return ms;
}

cudaEvent_t Event::get() const { return impl_ ? impl_->ev : nullptr; }

// ---- CudaDevice -------------------------------------------------------------------

// Page-locked blocks whose handles went while the device lived (see allocate_host).
struct CudaDevice::ReleasedHost {
  std::mutex mu;
  bool device_alive = true;
  std::vector<void*> blocks;
};

CudaDevice::CudaDevice(CudaDeviceOptions options)
    : options_(options), released_host_(std::make_shared<ReleasedHost>()) {
  std::string why;
  if (!gpu_available(&why)) throw CudaError("CudaDevice: no usable CUDA device: " + why);
  if (options_.device < 0 || options_.device >= device_count())
    throw CudaError("CudaDevice: device " + std::to_string(options_.device) + " outside the " +
                    std::to_string(device_count()) + " visible CUDA devices");
  make_current();
  try {
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    blas_ = std::make_unique<Blas>(compute_, options_.cublas_workspace);
    TROUPE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&result_device_), sizeof(double)));
    TROUPE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&result_host_), sizeof(double)));
    cudaDeviceProp prop{};
    TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, options_.device));
    name_ = "cuda:" + std::to_string(options_.device) + " " + prop.name + " (sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
            std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
  } catch (...) {
    release_all();
    throw;
  }
}

CudaDevice::~CudaDevice() { release_all(); }

void CudaDevice::release_all() noexcept {
  cudaSetDevice(options_.device);
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_) cudaStreamSynchronize(comm_);
  blas_.reset();
  uploads_.clear();
  {
    std::lock_guard lock(released_host_->mu);
    released_host_->device_alive = false;
  }
  free_released_host();
  for (auto& r : regions_) {
    if (r.ptr) cudaFree(r.ptr);
    r = {};
  }
  if (result_device_) cudaFree(result_device_);
  if (result_host_) cudaFreeHost(result_host_);
  result_device_ = nullptr;
  result_host_ = nullptr;
  if (compute_) cudaStreamDestroy(compute_);
  if (comm_) cudaStreamDestroy(comm_);
  compute_ = comm_ = nullptr;
}

void CudaDevice::make_current() const { TROUPE_CUDA_CHECK(cudaSetDevice(options_.device)); }

std::string CudaDevice::describe() const {
  return name_ + (options_.gemm == GemmType::kBf16 ? ", GEMMs: bf16 operands, fp32 accumulation"
                                                   : ", GEMMs: fp32 operands (no TF32)");
}

Event CudaDevice::record_event(Stream s, bool timing) {
  make_current();
  Event e;
  e.impl_ = std::make_shared<Event::Impl>();
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e.impl_->ev, timing ? cudaEventDefault : cudaEventDisableTiming));
  TROUPE_CUDA_CHECK(cudaEventRecord(e.impl_->ev, stream(s)));
  return e;
}

void CudaDevice::wait_event(Stream s, const Event& e) {
  if (!e.valid()) throw std::logic_error("CudaDevice::wait_event on an empty event");
  make_current();
  TROUPE_CUDA_CHECK(cudaStreamWaitEvent(stream(s), e.get(), 0));
}

namespace {
void CUDART_CB run_host_callback(void* p) {
  auto* fn = static_cast<std::function<void()>*>(p);
  try {
    (*fn)();
  } catch (...) {
  }
  delete fn;
}
}  // namespace

void CudaDevice::on_complete(std::function<void()> fn, Stream s) {
  make_current();
  auto* heap = new std::function<void()>(std::move(fn));
  const cudaError_t e = cudaLaunchHostFunc(stream(s), run_host_callback, heap);
  if (e != cudaSuccess) {
    delete heap;
    TROUPE_CUDA_CHECK(e);
  }
}

void* CudaDevice::scratch(Slot slot, size_t bytes) {
  Region& r = regions_[slot];
  if (r.bytes >= bytes && r.ptr) return r.ptr;
  // Queued kernels may still read the old region.
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
  if (r.ptr) TROUPE_CUDA_CHECK(cudaFree(r.ptr));
  r = {};
  const size_t want = (bytes + 255) / 256 * 256;
  TROUPE_CUDA_CHECK(cudaMalloc(&r.ptr, want == 0 ? 256 : want));
  r.bytes = want == 0 ? 256 : want;
  memory().add(&r, int64_t(r.bytes), MemoryCategory::kScratch);
  return r.ptr;
}

const void* CudaDevice::operand(Slot slot, const float* X, int64_t rows, int64_t cols, int64_t ld,
                                int64_t* ld_out) {
  if (options_.gemm == GemmType::kF32) {
    *ld_out = ld;
    return X;
  }
  auto* dst = static_cast<__nv_bfloat16*>(scratch(slot, size_t(rows) * size_t(cols) * 2));
  launch::f32_to_bf16_2d(dst, X, rows, cols, ld, compute_);
  *ld_out = cols;
  return dst;
}

void CudaDevice::gemm_rm(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int64_t lda, int64_t sa,
                         const void* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc,
                         int batch) {
  blas_->gemm(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, options_.gemm);
}

// ---- memory -------------------------------------------------------------------------

Buffer CudaDevice::allocate(int64_t count, DType dtype) {
  if (count < 0) throw std::invalid_argument("CudaDevice::allocate: negative count");
  make_current();
  size_t bytes = size_t(count) * dtype_size(dtype);
  bytes = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw CudaError("CudaDevice::allocate: cudaMalloc of " + std::to_string(bytes) + " bytes on " + name_ +
                    " failed: " + cudaGetErrorString(e));
  }
  try {
    TROUPE_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_));
    // Zero before any stream (communication included) can touch it.
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
  } catch (...) {
    cudaFree(p);
    throw;
  }
  memory().add(p, count * int64_t(dtype_size(dtype)), current_memory_category());
  return Buffer(this, p, count, dtype);
}

void CudaDevice::release(void* data) {
  memory().remove(data);
  cudaSetDevice(options_.device);
  cudaFree(data);  // waits for the device; errors cannot be reported from a destructor
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  make_current();
  // Default: under unified addressing the runtime finds where each pointer lives, so
  // `src` may be another GPU's memory (a pipeline neighbour's slot in one process: a
  // peer copy, on this device's stream).
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, compute_));
}

void CudaDevice::copy_from_host(void* dst, const void* src, size_t bytes) {
  make_current();
  if (bytes > kStagedUploadBytes) {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_));
    // The caller may reuse src when this returns (even pinned memory).
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
    return;
  }
  std::lock_guard lock(upload_mu_);
  if (uploads_.empty() || (uploads_[next_upload_].copied.valid() && !uploads_[next_upload_].copied.done() &&
                           uploads_.size() < kMaxUploadBlocks))
    uploads_.insert(uploads_.begin() + std::ptrdiff_t(next_upload_), Upload{});
  Upload& u = uploads_[next_upload_];
  next_upload_ = (next_upload_ + 1) % uploads_.size();
  if (u.copied.valid()) u.copied.wait();  // done by now unless kMaxUploadBlocks are in flight
  if (u.bytes < bytes) {
    u.bytes = std::max<size_t>(bytes, size_t(64) << 10);
    u.host = allocate_host(u.bytes);
  }
  std::memcpy(u.host.get(), src, bytes);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, u.host.get(), bytes, cudaMemcpyHostToDevice, compute_));
  u.copied = record_event(Stream::kCompute);
}

void CudaDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  make_current();
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDevice::fill_zero(void* dst, size_t bytes) {
  make_current();
  TROUPE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_));
}

void CudaDevice::when_done(std::function<void()> fn) {
  wait_event(Stream::kCompute, record_event(Stream::kComm));
  on_complete(std::move(fn), Stream::kCompute);
}

void CudaDevice::free_released_host() noexcept {
  std::vector<void*> blocks;
  {
    std::lock_guard lock(released_host_->mu);
    blocks.swap(released_host_->blocks);
  }
  for (void* p : blocks) cudaFreeHost(p);
}

std::shared_ptr<void> CudaDevice::allocate_host(size_t bytes) {
  make_current();
  free_released_host();
  void* p = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  std::memset(p, 0, std::max<size_t>(bytes, 1));
  return {p, [released = released_host_](void* q) {
            {
              std::lock_guard lock(released->mu);
              if (released->device_alive) return released->blocks.push_back(q);
            }
            cudaFreeHost(q);  // the device is gone, and with it its callbacks
          }};
}

void CudaDevice::copy_to_host_async(void* dst, const void* src, size_t bytes) {
  make_current();
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
}

void CudaDevice::copy_from_host_async(void* dst, const void* src, size_t bytes) {
  make_current();
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_));
}

void CudaDevice::synchronize() {
  make_current();
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(comm_));
}

// ---- GEMM and layers ----------------------------------------------------------------

void CudaDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc) {
  make_current();
  int64_t la = 0, lb = 0;
  // Stored shapes: A is [K, M] when transposed else [M, K]; B is [N, K] or [K, N].
  const void* a = operand(kOperandA, A, ta ? K : M, ta ? M : K, lda, &la);
  const void* b = operand(kOperandB, B, tb ? N : K, tb ? K : N, ldb, &lb);
  gemm_rm(ta, tb, M, N, K, alpha, a, la, 0, b, lb, 0, beta, C, ldc, 0, 1);
}

void CudaDevice::embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                                   const float* wpe, int N, int C) {
  make_current();
  launch::embedding_forward(out, tokens, positions, wte, wpe, N, C, compute_);
}

void CudaDevice::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                    const int32_t* positions, int N, int C) {
  make_current();
  const size_t bytes = launch::embedding_backward_scratch_bytes(N);
  launch::embedding_backward(dwte, dwpe, dout, tokens, positions, N, C, scratch(kSort, bytes), bytes, compute_);
}

void CudaDevice::embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions,
                                         const float* wte, const float* wpe, int N, int C, int vocab_begin,
                                         int vocab_rows) {
  make_current();
  launch::embedding_forward_shard(out, tokens, positions, wte, wpe, N, C, vocab_begin, vocab_rows, compute_);
}

void CudaDevice::embedding_backward_shard(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                          const int32_t* positions, int N, int C, int vocab_begin, int vocab_rows) {
  make_current();
  const size_t bytes = launch::embedding_backward_scratch_bytes(N);
  launch::embedding_backward(dwte, dwpe, dout, tokens, positions, N, C, scratch(kSort, bytes), bytes, compute_,
                             vocab_begin, vocab_rows);
}

void CudaDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                   const float* bias, int N, int C, float eps) {
  make_current();
  launch::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, compute_);
}

void CudaDevice::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int N, int C) {
  make_current();
  auto* s = static_cast<float*>(scratch(kReduce, size_t(2 * launch::column_reduce_scratch(N, C)) * sizeof(float)));
  launch::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s, compute_);
}

void CudaDevice::linear_forward(float* out, float* gelu_out, const float* inp, const float* weight, const float* bias,
                                const float* residual, int N, int C, int OC) {
  make_current();
  const bool init = bias || residual;
  if (init) launch::bias_residual_init(out, bias, residual, N, OC, compute_);
  int64_t la = 0, lw = 0;
  const void* a = operand(kOperandA, inp, N, C, C, &la);
  const void* w = operand(kOperandB, weight, C, OC, OC, &lw);
  gemm_rm(false, false, N, OC, C, 1.0f, a, la, 0, w, lw, 0, init ? 1.0f : 0.0f, out, OC, 0, 1);
  if (gelu_out) launch::gelu_forward(gelu_out, out, int64_t(N) * OC, compute_);
}

void CudaDevice::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* weight, const float* gelu_pre, int N, int C, int OC) {
  make_current();
  int64_t ld = 0;
  const void* d = operand(kOperandC, dout, N, OC, OC, &ld);
  if (dinp) {
    int64_t lw = 0;
    const void* w = operand(kOperandB, weight, C, OC, OC, &lw);
    // dinp[N, C] = dout[N, OC] * weight[C, OC]^T
    gemm_rm(false, true, N, C, OC, 1.0f, d, ld, 0, w, lw, 0, 0.0f, dinp, C, 0, 1);
    if (gelu_pre) launch::gelu_backward(dinp, gelu_pre, dinp, int64_t(N) * C, compute_);
  }
  if (dweight) {
    int64_t lx = 0;
    const void* x = operand(kOperandA, inp, N, C, C, &lx);
    // dweight[C, OC] += inp[N, C]^T * dout[N, OC]
    gemm_rm(true, false, C, OC, N, 1.0f, x, lx, 0, d, ld, 0, 1.0f, dweight, OC, 0, 1);
  }
  if (dbias) {
    auto* s = static_cast<float*>(scratch(kReduce, size_t(launch::column_reduce_scratch(N, OC)) * sizeof(float)));
    launch::bias_backward(dbias, dout, N, OC, s, compute_);
  }
}

void CudaDevice::gelu_forward(float* out, const float* inp, int64_t n) {
  make_current();
  launch::gelu_forward(out, inp, n, compute_);
}

void CudaDevice::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  make_current();
  launch::gelu_backward(dinp, inp, dout, n, compute_);
}

void CudaDevice::add(float* out, const float* a, const float* b, int64_t n) {
  make_current();
  launch::add(out, a, b, n, compute_);
}

void CudaDevice::scale(float* x, int64_t n, float s) {
  make_current();
  launch::scale(x, n, s, compute_);
}

void CudaDevice::dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols,
                         int T, const DropoutMask& drop) {
  make_current();
  launch::dropout(out, in, add, first_row, rows, cols, T, drop, compute_);
}

// ---- loss -------------------------------------------------------------------------

void CudaDevice::crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                      const float* mask, int N, int V, int ld) {
  make_current();
  auto* partials = static_cast<float*>(scratch(kReduce, size_t(3) * size_t(N) * sizeof(float)));
  launch::crossentropy_partials(partials, logits, targets, mask, N, V, ld, 0, compute_);
  launch::crossentropy_combine(losses, lse, partials, 1, mask, N, compute_);
}

void CudaDevice::crossentropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                       const float* mask, float scale, int N, int V, int ld) {
  crossentropy_backward_shard(dlogits, logits, lse, targets, mask, scale, N, V, ld, 0);
}

void CudaDevice::crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                                       const float* mask, int N, int V, int ld, int vocab_begin) {
  make_current();
  launch::crossentropy_partials(partials, logits, targets, mask, N, V, ld, vocab_begin, compute_);
}

void CudaDevice::crossentropy_combine(float* losses, float* lse, const float* partials, int S, const float* mask,
                                      int N) {
  make_current();
  launch::crossentropy_combine(losses, lse, partials, S, mask, N, compute_);
}

void CudaDevice::crossentropy_backward_shard(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, const float* mask, float scale, int N, int V,
                                             int ld, int vocab_begin) {
  make_current();
  launch::crossentropy_backward(dlogits, logits, lse, targets, mask, scale, N, V, ld, vocab_begin, compute_);
}

// ---- optimizer ------------------------------------------------------------------------

void CudaDevice::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args) {
  make_current();
  launch::adamw_update(param, grad, m, v, n, args, compute_);
}

void CudaDevice::adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                                    const AdamWArgs& args, double* update_sq, double* weight_sq) {
  make_current();
  // [2 * blocks] block partials, then the two results: one scratch serves every call,
  // the copies out of it run before the next kernel writes it (stream order).
  const int64_t blocks = launch::adamw_norms_scratch(n);
  auto* s = static_cast<double*>(scratch(kReduce, size_t(2 * blocks + 2) * sizeof(double)));
  double* results = s + 2 * blocks;
  launch::adamw_update_norms(param, grad, m, v, n, args, results, s, compute_);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(update_sq, results, sizeof(double), cudaMemcpyDeviceToHost, compute_));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(weight_sq, results + 1, sizeof(double), cudaMemcpyDeviceToHost, compute_));
}

void CudaDevice::sum_squares_to_host(double* dst, const float* x, int64_t n) {
  make_current();
  auto* s = static_cast<double*>(scratch(kReduce, size_t(std::max<int64_t>(1, launch::sum_squares_scratch(n))) *
                                                       sizeof(double)));
  // One result slot serves every call: the copy out of it runs before the next kernel
  // writes it (stream order).
  launch::sum_squares(result_device_, x, n, s, compute_);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, result_device_, sizeof(double), cudaMemcpyDeviceToHost, compute_));
}

double CudaDevice::sum_squares(const float* x, int64_t n) {
  sum_squares_to_host(result_host_, x, n);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
  return *result_host_;
}

}  // namespace troupe::kernels::cuda
