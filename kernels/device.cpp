// Defaults of the optional Device primitives: when_done and the non-blocking reads for
// a device with nothing pending, and the tensor-parallel pieces, which a device that
// does not implement them cannot run (it says so by name).
#include "kernels/device.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace troupe::kernels {

void Device::when_done(std::function<void()> fn) {
  synchronize();
  fn();
}

std::shared_ptr<void> Device::allocate_host(size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  void* p = ::operator new(std::max<size_t>(bytes, 1), kAlign);
  std::memset(p, 0, std::max<size_t>(bytes, 1));
  return {p, [](void* q) { ::operator delete(q, kAlign); }};
}

void Device::copy_to_host_async(void* dst, const void* src, size_t bytes) { copy_to_host(dst, src, bytes); }

void Device::sum_squares_to_host(double* dst, const float* x, int64_t n) { *dst = sum_squares(x, n); }
void Device::sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                       const std::vector<int64_t>& piece_ends) {
  sum_squares_to_host(total, x, n);
  int64_t begin = 0;
  for (size_t p = 0; p < piece_ends.size(); ++p) {
    sum_squares_to_host(piece_sums + p, x + begin, piece_ends[p] - begin);
    begin = piece_ends[p];
  }
}

void Device::copy_from_host_async(void* dst, const void* src, size_t bytes) { copy_from_host(dst, src, bytes); }

void Device::adamw_update_pieces(float* param, const float* grad, float* m, float* v,
                                 const std::vector<AdamWPiece>& pieces, const AdamWArgs& args) {
  AdamWArgs a = args;
  for (const AdamWPiece& p : pieces) {
    a.weight_decay = p.weight_decay;
    if (p.update_sq)
      adamw_update_norms(param + p.begin, grad + p.begin, m + p.begin, v + p.begin, p.end - p.begin, a, p.update_sq,
                         p.weight_sq);
    else
      adamw_update(param + p.begin, grad + p.begin, m + p.begin, v + p.begin, p.end - p.begin, a);
  }
}

namespace {

[[noreturn]] void missing(const Device& d, const char* what) {
  throw std::logic_error(d.describe() + " does not implement " + what +
                         " (needed for tensor parallelism)");
}

}  // namespace

void Device::embedding_forward_shard(float*, const int32_t*, const int32_t*, const float*, const float*, int, int,
                                     int, int) {
  missing(*this, "embedding_forward_shard");
}
void Device::embedding_backward_shard(float*, float*, const float*, const int32_t*, const int32_t*, int, int, int,
                                      int) {
  missing(*this, "embedding_backward_shard");
}
void Device::crossentropy_partials(float*, const float*, const int32_t*, const float*, int, int, int, int) {
  missing(*this, "crossentropy_partials");
}
void Device::crossentropy_combine(float*, float*, const float*, int, const float*, int) {
  missing(*this, "crossentropy_combine");
}
void Device::crossentropy_backward_shard(float*, const float*, const float*, const int32_t*, const float*, float, int,
                                         int, int, int) {
  missing(*this, "crossentropy_backward_shard");
}

void Device::rmsnorm_forward(float*, float*, const float*, const float*, int, int, float) {
  throw std::logic_error(describe() + " does not implement rmsnorm_forward (needed for RMSNorm layers)");
}

void Device::rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*, int, int) {
  throw std::logic_error(describe() + " does not implement rmsnorm_backward (needed for RMSNorm layers)");
}

void Device::rope_forward(float*, const int32_t*, const float*, const float*, int, int, int, int64_t) {
  throw std::logic_error(describe() + " does not implement rope_forward (needed for rotary positions)");
}

void Device::rope_backward(float*, const int32_t*, const float*, const float*, int, int, int, int64_t) {
  throw std::logic_error(describe() + " does not implement rope_backward (needed for rotary positions)");
}

void Device::swiglu_forward(float*, const float*, const float*, int64_t) {
  throw std::logic_error(describe() + " does not implement swiglu_forward (needed for SwiGLU MLPs)");
}

void Device::swiglu_backward(float*, float*, const float*, const float*, const float*, int64_t) {
  throw std::logic_error(describe() + " does not implement swiglu_backward (needed for SwiGLU MLPs)");
}

void Device::gqa_attention_forward(float*, float*, const float*, const int32_t*, int, int, int, int, int,
                                   const DropoutMask&) {
  throw std::logic_error(describe() + " does not implement gqa_attention_forward (needed for grouped-query attention)");
}

void Device::gqa_attention_backward(float*, const float*, const float*, const float*, const int32_t*, int, int, int,
                                    int, int, const DropoutMask&) {
  throw std::logic_error(describe() + " does not implement gqa_attention_backward (needed for grouped-query attention)");
}

void Device::dropout(float*, const float*, const float*, int64_t, int64_t, int, int, const DropoutMask&) {
  throw std::logic_error(describe() + " does not implement dropout (needed for model.hidden_dropout)");
}

}  // namespace troupe::kernels
