#include "model/layers/head.h"

namespace troupe::model::layers {

Head::Head(const HeadConfig& c, Weight w, TpContext& tp) : c_(c), w_(w), tp_(tp) {}

void Head::forward(float* logits, float* x, int N) {
  tp_.gather_sequence(x, N, c_.width);
  const int D = c_.width, V = c_.vocab.valid;
  if (V > 0) tp_.device().gemm(false, true, N, V, D, 1.0f, x, D, w_.value, D, 0.0f, logits, ld());
}

float* Head::backward(float* dx, const float* dlogits, const float* x, int N, WeightGradQueue* defer) {
  kernels::Device& dev = tp_.device();
  const int D = c_.width, V = c_.vocab.valid;
  if (V > 0) {
    dev.gemm(false, false, N, D, V, 1.0f, dlogits, ld(), w_.value, D, 0.0f, dx, D);
    if (defer)  // dlogits and x stay in the slot
      defer->gemm(dev, true, false, V, D, N, dlogits, ld(), x, D, w_.grad, D);
    else
      dev.gemm(true, false, V, D, N, 1.0f, dlogits, ld(), x, D, 1.0f, w_.grad, D);
  } else {
    dev.fill_zero(dx, size_t(N) * size_t(D) * sizeof(float));
  }
  return tp_.complete_input_grad(dx, N, D);
}

}  // namespace troupe::model::layers
