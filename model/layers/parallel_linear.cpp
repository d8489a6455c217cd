#include "model/layers/parallel_linear.h"

#include "model/qkv_pieces.h"

namespace troupe::model::layers {

void column_parallel_forward(TpContext& tp, float* out, float* gelu_out, float* x, Weight w, Weight b, int N,
                             int K, int OC) {
  tp.gather_sequence(x, N, K);
  tp.device().linear_forward(out, gelu_out, x, w.value, b.value, nullptr, N, K, OC);
}

namespace {

// dw[K, OC] += x[N, K]^T dout[N, OC], queued on defer (dout kept) when there is one:
// the GEMM Device::linear_backward issues for its dweight.
void linear_weight_grad(kernels::Device& dev, WeightGradQueue* defer, float* dw, const float* dout,
                        const float* x, int N, int K, int OC) {
  defer->gemm(dev, true, false, K, OC, N, x, K, defer->keep(dev, dout, int64_t(N) * OC), OC, dw, OC);
}

}  // namespace

float* column_parallel_backward(TpContext& tp, float* dx, const float* dout, const float* x, Weight w, Weight b,
                                int N, int K, int OC, WeightGradQueue* defer) {
  tp.device().linear_backward(dx, defer ? nullptr : w.grad, b.grad, dout, x, w.value, nullptr, N, K, OC);
  if (defer) linear_weight_grad(tp.device(), defer, w.grad, dout, x, N, K, OC);
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
                                    Weight b, int N, int K, int OCp, WeightGradQueue* defer) {
  kernels::Device& dev = tp.device();
  if (tp.size() == 1) {
    dev.linear_backward(dx, defer ? nullptr : w.grad, b.grad, dqkv, x, w.value, nullptr, N, K, 3 * OCp);
    if (defer) linear_weight_grad(dev, defer, w.grad, dqkv, x, N, K, 3 * OCp);
  } else {
    qkv_pieces_backward(dev, dx, defer ? nullptr : w.grad, b.grad, dqkv, x, w.value, tp.ones(), N, K, OCp);
    if (defer) {  // the pieces' GEMMs of qkv_pieces_backward, in its order
      const float* kept = defer->keep(dev, dqkv, int64_t(N) * 3 * OCp);
      for (int j = 0; j < 3; ++j)
        defer->gemm(dev, true, false, K, OCp, N, x, K, kept + j * OCp, 3 * OCp, w.grad + int64_t(j) * K * OCp, OCp);
    }
  }
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
  if (residual) dev.add(out, out, residual, tp.rows(N) * D);
}

void row_parallel_backward(TpContext& tp, float* dx, float* dout, const float* x, Weight w, Weight b,
                           const float* gelu_pre, int N, int K, int D, WeightGradQueue* defer) {
  tp.gather_sequence(dout, N, D);
  tp.device().linear_backward(dx, defer ? nullptr : w.grad, b.grad, dout, x, w.value, gelu_pre, N, K, D);
  if (defer) linear_weight_grad(tp.device(), defer, w.grad, dout, x, N, K, D);
}

void linear_nt_forward(kernels::Device& dev, float* out, int64_t ldo, const float* x, Weight w, int N, int K,
                       int OC) {
  dev.gemm(false, true, N, OC, K, 1.0f, x, K, w.value, K, 0.0f, out, int(ldo));
}

void linear_nt_backward(kernels::Device& dev, float* dx, bool accumulate, const float* dout, int64_t lddout,
                        const float* x, Weight w, int N, int K, int OC, WeightGradQueue* defer) {
  dev.gemm(false, false, N, K, OC, 1.0f, dout, int(lddout), w.value, K, accumulate ? 1.0f : 0.0f, dx, K);
  if (defer)  // dout as the caller keeps it (the slot's, or kept by the caller first)
    defer->gemm(dev, true, false, OC, K, N, dout, int(lddout), x, K, w.grad, K);
  else
    dev.gemm(true, false, OC, K, N, 1.0f, dout, int(lddout), x, K, 1.0f, w.grad, K);
}

void row_parallel_nt_forward(TpContext& tp, float* out, const float* x, Weight w, const float* residual, int N,
                             int K, int D, float* partial) {
  kernels::Device& dev = tp.device();
  const int64_t rows = tp.rows(N);
  if (tp.size() == 1 || !tp.sequence()) {
    // out = residual (added by one rank) + x w^T, summed over the group.
    if (tp.owner() && residual)
      dev.copy(out, residual, size_t(rows) * size_t(D) * sizeof(float));
    else
      dev.fill_zero(out, size_t(rows) * size_t(D) * sizeof(float));
    dev.gemm(false, true, N, D, K, 1.0f, x, K, w.value, K, 1.0f, out, D);
    tp.reduce_to_rows(out, out, N, D);
    return;
  }
  dev.gemm(false, true, N, D, K, 1.0f, x, K, w.value, K, 0.0f, partial, D);
  tp.reduce_to_rows(partial, out, N, D);
  if (residual) dev.add(out, out, residual, rows * D);
}

void row_parallel_nt_backward(TpContext& tp, float* dx, float* dout, const float* x, Weight w, int N, int K, int D,
                              WeightGradQueue* defer) {
  tp.gather_sequence(dout, N, D);
  const float* kept = defer ? defer->keep(tp.device(), dout, int64_t(N) * D) : dout;
  linear_nt_backward(tp.device(), dx, false, kept, D, x, w, N, K, D, defer);
}

}  // namespace troupe::model::layers
