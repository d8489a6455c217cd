#include "kernels/cpu/cpu_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/gemm.h"

namespace troupe::kernels::cpu {

CpuDevice::CpuDevice(int threads) : pool_(threads) {
  use_single_threaded_blas();
  scratch_.per_thread.resize(size_t(threads));
}

std::string CpuDevice::describe() const {
  const GemmKernel k = gemm_kernel();
  return "cpu (" + std::to_string(pool_.size()) + " thread" + (pool_.size() == 1 ? "" : "s") +
         (k == GemmKernel::kOwnAvx512 ? ", troupe's AVX-512 sgemm per participant)"
          : k == GemmKernel::kDnnl    ? ", oneDNN's sgemm single-threaded per participant)"
                                      : ", OpenBLAS single-threaded per participant)");
}

Buffer CpuDevice::allocate(int64_t count, DType dtype) {
  if (count < 0) throw std::invalid_argument("CpuDevice::allocate: negative count");
  size_t bytes = size_t(count) * dtype_size(dtype);
  bytes = (bytes + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  memory().add(p, count * int64_t(dtype_size(dtype)), current_memory_category());
  return Buffer(this, p, count, dtype);
}

void CpuDevice::release(void* data) {
  memory().remove(data);
  std::free(data);
}

int64_t CpuDevice::allocated_blocks() const {
  return const_cast<CpuDevice*>(this)->memory().blocks() - (scratch_accounted_ > 0 ? 1 : 0);
}

void CpuDevice::account_kernel_scratch() {
  const int64_t now = scratch_bytes();
  if (now == scratch_accounted_) return;
  memory().add(&scratch_, now, MemoryCategory::kScratch);
  scratch_accounted_ = now;
}

int64_t CpuDevice::scratch_bytes() const {
  int64_t bytes = int64_t((scratch_.partials.capacity() + scratch_.update_partials.capacity() +
                           scratch_.piece_partials.capacity()) *
                          sizeof(double));
  bytes += int64_t(scratch_.block_pieces.capacity() * sizeof(int64_t));
  bytes += int64_t(scratch_.adamw_blocks.capacity() * sizeof(cpu::Scratch::AdamWBlock));
  for (const auto& v : scratch_.per_thread) bytes += int64_t(v.capacity() * sizeof(float));
  return bytes;
}
void CpuDevice::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuDevice::copy_from_host(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuDevice::copy_to_host(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuDevice::fill_zero(void* dst, size_t bytes) {
  // Large fills split over the pool (a step's gradient buffer is 0.5 GB on GPT-2 124M:
  // one thread zeroes about 11 GB/s on the development VM, two about 21;
  // docs/performance.md). At least 2 MiB a participant: below, the dispatch costs more.
  constexpr int64_t kBytesPerThread = int64_t(2) << 20;
  auto* p = static_cast<char*>(dst);
  pool_.parallel_for(int64_t(bytes), kBytesPerThread,
                     [p](int64_t b, int64_t e) { std::memset(p + b, 0, size_t(e - b)); });
}

void CpuDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  cpu::gemm(pool_, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CpuDevice::embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                                  const float* wte, const float* wpe, int N, int C) {
  cpu::embedding_forward(pool_, out, tokens, positions, wte, wpe, N, C);
}
void CpuDevice::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                   const int32_t* tokens, const int32_t* positions, int N, int C) {
  cpu::embedding_backward(pool_, dwte, dwpe, dout, tokens, positions, N, C);
}
void CpuDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C, float eps) {
  cpu::layernorm_forward(pool_, out, mean, rstd, inp, weight, bias, N, C, eps);
}
void CpuDevice::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int N, int C) {
  cpu::layernorm_backward(pool_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void CpuDevice::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                float eps) {
  cpu::rmsnorm_forward(pool_, out, rstd, inp, weight, N, C, eps);
}
void CpuDevice::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C) {
  cpu::rmsnorm_backward(pool_, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void CpuDevice::linear_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                               const float* bias, const float* residual, int N, int C, int OC) {
  cpu::linear_forward(pool_, out, gelu_out, inp, weight, bias, residual, N, C, OC);
}
void CpuDevice::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, const float* gelu_pre, int N,
                                int C, int OC) {
  cpu::linear_backward(pool_, dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, C, OC);
}
void CpuDevice::attention_forward(float* out, float* att, const float* qkv,
                                  const int32_t* doc_start, int B, int T, int C, int NH, const DropoutMask& drop) {
  cpu::attention_forward(pool_, scratch_, out, att, qkv, doc_start, B, T, C, NH, drop);
  account_kernel_scratch();
}
void CpuDevice::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                   const float* att, const int32_t* doc_start, int B, int T, int C,
                                   int NH, const DropoutMask& drop) {
  cpu::attention_backward(pool_, scratch_, dqkv, dout, qkv, att, doc_start, B, T, C, NH, drop);
  account_kernel_scratch();
}
void CpuDevice::dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols,
                        int T, const DropoutMask& drop) {
  cpu::dropout(pool_, out, in, add, first_row, rows, cols, T, drop);
}
void CpuDevice::rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N,
                             int heads, int hs, int64_t ld) {
  cpu::rope_forward(pool_, x, positions, cos, sin, N, heads, hs, ld);
}
void CpuDevice::rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                              int heads, int hs, int64_t ld) {
  cpu::rope_backward(pool_, dx, positions, cos, sin, N, heads, hs, ld);
}
void CpuDevice::swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  cpu::swiglu_forward(pool_, out, gate, up, n);
}
void CpuDevice::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                int64_t n) {
  cpu::swiglu_backward(pool_, dgate, dup, dout, gate, up, n);
}
void CpuDevice::gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B,
                                      int T, int NH, int KV, int hs, const DropoutMask& drop) {
  cpu::gqa_attention_forward(pool_, scratch_, out, att, qkv, doc_start, B, T, NH, KV, hs, drop);
  account_kernel_scratch();
}
void CpuDevice::gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                       const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                                       const DropoutMask& drop) {
  cpu::gqa_attention_backward(pool_, scratch_, dqkv, dout, qkv, att, doc_start, B, T, NH, KV, hs, drop);
  account_kernel_scratch();
}
void CpuDevice::gelu_forward(float* out, const float* inp, int64_t n) { cpu::gelu_forward(pool_, out, inp, n); }
void CpuDevice::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  cpu::gelu_backward(pool_, dinp, inp, dout, n);
}
void CpuDevice::add(float* out, const float* a, const float* b, int64_t n) { cpu::add(pool_, out, a, b, n); }
void CpuDevice::scale(float* x, int64_t n, float s) { cpu::scale(pool_, x, n, s); }
void CpuDevice::crossentropy_forward(float* losses, float* lse, const float* logits,
                                     const int32_t* targets, const float* mask, int N, int V, int ld) {
  cpu::crossentropy_forward(pool_, losses, lse, logits, targets, mask, N, V, ld);
}
void CpuDevice::crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                      const int32_t* targets, const float* mask, float scale, int N,
                                      int V, int ld) {
  cpu::crossentropy_backward(pool_, dlogits, logits, lse, targets, mask, scale, N, V, ld, 0);
}
void CpuDevice::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                             const AdamWArgs& args) {
  cpu::adamw_update(pool_, param, grad, m, v, n, args);
}
void CpuDevice::adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                                   const AdamWArgs& args, double* update_sq, double* weight_sq) {
  cpu::adamw_update_norms(pool_, scratch_, param, grad, m, v, n, args, update_sq, weight_sq);
  account_kernel_scratch();
}
void CpuDevice::adamw_update_pieces(float* param, const float* grad, float* m, float* v,
                                    const std::vector<AdamWPiece>& pieces, const AdamWArgs& args) {
  cpu::adamw_update_pieces(pool_, scratch_, param, grad, m, v, pieces, args);
  account_kernel_scratch();
}
double CpuDevice::sum_squares(const float* x, int64_t n) {
  const double s = cpu::sum_squares(pool_, scratch_, x, n);
  account_kernel_scratch();
  return s;
}
void CpuDevice::sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                          const std::vector<int64_t>& piece_ends) {
  *total = cpu::sum_squares_split(pool_, scratch_, x, n, piece_ends.data(), int64_t(piece_ends.size()), piece_sums);
  account_kernel_scratch();
}

}  // namespace troupe::kernels::cpu
