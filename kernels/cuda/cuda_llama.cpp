// The Llama family's row and elementwise primitives on the CUDA device (RMSNorm, RoPE,
// SwiGLU), all fp32 and enqueued on the compute stream; grouped-query attention is in
// cuda_gqa_attention.cpp.
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_device.h"

namespace troupe::kernels::cuda {
namespace {

void check_head_size(int hs) {
  if (hs % 2 != 0) throw std::invalid_argument("rope: head size " + std::to_string(hs) + " is odd");
}

}  // namespace

void CudaDevice::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                                 float eps) {
  make_current();
  launch::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, compute_);
}

void CudaDevice::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                  const float* weight, const float* rstd, int N, int C) {
  make_current();
  auto* s = static_cast<float*>(scratch(kReduce, size_t(launch::column_reduce_scratch(N, C)) * sizeof(float)));
  launch::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, s, compute_);
}

void CudaDevice::rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N,
                              int heads, int hs, int64_t ld) {
  check_head_size(hs);
  make_current();
  launch::rope_forward(x, positions, cos, sin, N, heads, hs, ld, compute_);
}

void CudaDevice::rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                               int heads, int hs, int64_t ld) {
  check_head_size(hs);
  make_current();
  launch::rope_backward(dx, positions, cos, sin, N, heads, hs, ld, compute_);
}

void CudaDevice::swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  make_current();
  launch::swiglu_forward(out, gate, up, n, compute_);
}

void CudaDevice::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                 int64_t n) {
  make_current();
  launch::swiglu_backward(dgate, dup, dout, gate, up, n, compute_);
}

}  // namespace troupe::kernels::cuda
