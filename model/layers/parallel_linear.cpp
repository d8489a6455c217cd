#include "model/layers/parallel_linear.h"

#include "model/qkv_pieces.h"

namespace troupe::model::layers {

void column_parallel_forward(TpContext& tp, float* out, float* gelu_out, float* x, Weight w, Weight b, int N,
                             int K, int OC) {
  tp.gather_sequence(x, N, K);
  tp.device().linear_forward(out, gelu_out, x, w.value, b.value, nullptr, N, K, OC);
}

float* column_parallel_backward(TpContext& tp, float* dx, const float* dout, const float* x, Weight w, Weight b,
                                int N, int K, int OC) {
  tp.device().linear_backward(dx, w.grad, b.grad, dout, x, w.value, nullptr, N, K, OC);
  return tp.complete_input_grad(dx, N, K);
}

void column_parallel_qkv_forward(TpContext& tp, float* qkv, float* x, Weight w, Weight b, int N, int K, int OCp) {
  tp.gather_sequence(x, N, K);
  // One rank's three pieces are one contiguous matrix only when they are the whole
  // weight; split, each piece's GEMM writes its column block.
  if (tp.size() == 1)
    tp.device().linear_forward(qkv, nullptr, x, w.value, b.value, nullptr, N, K, 3 * OCp);
  else
    qkv_pieces_forward(tp.device(), qkv, x, w.value, b.value, tp.ones(), N, K, OCp);
}

float* column_parallel_qkv_backward(TpContext& tp, float* dx, const float* dqkv, const float* x, Weight w,
                                    Weight b, int N, int K, int OCp) {
  if (tp.size() == 1)
    tp.device().linear_backward(dx, w.grad, b.grad, dqkv, x, w.value, nullptr, N, K, 3 * OCp);
  else
    qkv_pieces_backward(tp.device(), dx, w.grad, b.grad, dqkv, x, w.value, tp.ones(), N, K, OCp);
  return tp.complete_input_grad(dx, N, K);
}

void row_parallel_forward(TpContext& tp, float* out, const float* x, Weight w, Weight b, const float* residual,
                          int N, int K, int D, float* partial) {
  kernels::Device& dev = tp.device();
  if (tp.size() == 1) {
    dev.linear_forward(out, nullptr, x, w.value, b.value, residual, N, K, D);
    return;
  }
  const bool owner = tp.owner();
  if (!tp.sequence()) {
    // out = (residual + b + x W)_0 + (x W)_1 + ...: every rank ends with the same sum.
    dev.linear_forward(out, nullptr, x, w.value, owner ? b.value : nullptr, owner ? residual : nullptr, N, K, D);
    tp.reduce_to_rows(out, out, N, D);
    return;
  }
  dev.linear_forward(partial, nullptr, x, w.value, owner ? b.value : nullptr, nullptr, N, K, D);
  tp.reduce_to_rows(partial, out, N, D);
  dev.add(out, out, residual, tp.rows(N) * D);
}

void row_parallel_backward(TpContext& tp, float* dx, float* dout, const float* x, Weight w, Weight b,
                           const float* gelu_pre, int N, int K, int D) {
  tp.gather_sequence(dout, N, D);
  tp.device().linear_backward(dx, w.grad, b.grad, dout, x, w.value, gelu_pre, N, K, D);
}

}  // namespace troupe::model::layers
