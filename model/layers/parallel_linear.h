// Column- and row-parallel linear layers (Megatron-LM's split), the identity
// wrappers of Device::linear_* at TP = 1. Weights are Conv1D-shaped [in, out].
//
// Column-parallel: W[K, OC_total] split by output columns; rank t holds [K, OC]
// (OC = OC_total / TP). Its input is the whole [N, K] on every rank (gathered first
// under sequence parallelism); its output [N, OC] is the rank's columns; in backward
// the input gradient is a partial sum, completed over the group.
//
// Row-parallel: W[K_total, D] split by input rows; rank t holds [K, D] and takes the
// matching columns [N, K] of the input (a column-parallel layer's output). Its output
// is the group's sum of the ranks' products, plus the bias and the residual added
// once: every rank gets the whole [N, D] (no SP) or its rows [Nr, D] (SP).
//
// Shapes use N tokens, Nr = TpContext::rows(N) residual rows held here.
#pragma once

#include "model/layers/layer.h"
#include "model/layers/tp_context.h"
#include "model/layers/weight_grad_queue.h"

namespace troupe::model::layers {

// out[N, OC] = x[N, K] w[K, OC] + b[OC];  gelu_out[N, OC] = gelu(out) when not null.
// x: [N, K] with this rank's rows filled; all-gathered in place first under SP (and
// kept whole, so backward reuses it).
void column_parallel_forward(TpContext& tp, float* out, float* gelu_out, float* x, Weight w, Weight b, int N,
                             int K, int OC);
// dx[N, K] = dout[N, OC] w^T (overwritten);  dw[K, OC] +=, db[OC] +=.
// Returns this rank's rows [Nr, K] of the group's completed dx (dx itself at TP = 1).
// Every backward here takes `defer`: when not null, dw's GEMM is queued there (dout
// kept in its region, x read later where it is: in the slot) instead of issued now;
// biases are added now either way (weight_grad_queue.h).
float* column_parallel_backward(TpContext& tp, float* dx, const float* dout, const float* x, Weight w, Weight b,
                                int N, int K, int OC, WeightGradQueue* defer = nullptr);

// The column-parallel projection whose output columns are `3` blocks, each split over
// the ranks (attention's q | k | v): rank t holds three pieces [K, OCp] and a [3 OCp]
// bias, and writes qkv[N, 3 OCp] = q_t | k_t | v_t per token. At TP = 1 the three
// pieces are the whole weight [K, 3 OCp] and this is one linear (model/qkv_pieces.h
// otherwise). x as in column_parallel_forward.
void column_parallel_qkv_forward(TpContext& tp, float* qkv, float* x, Weight w, Weight b, int N, int K, int OCp);
// dx[N, K] = dqkv w^T; dw +=, db +=. Returns this rank's rows [Nr, K] of the completed dx.
float* column_parallel_qkv_backward(TpContext& tp, float* dx, const float* dqkv, const float* x, Weight w,
                                    Weight b, int N, int K, int OCp, WeightGradQueue* defer = nullptr);

// out[Nr, D] = residual[Nr, D] + b[D] + sum over ranks of x[N, K] w[K, D]; residual
// may be null (nothing added: a dropout site adds it after, layers/dropout.h).
// partial: [N, D] scratch (used under SP only). out may alias residual only without SP.
void row_parallel_forward(TpContext& tp, float* out, const float* x, Weight w, Weight b, const float* residual,
                          int N, int K, int D, float* partial);
// dout[N, D] with this rank's rows filled (all-gathered in place first under SP).
// dx[N, K] = dout w^T, times gelu'(gelu_pre[N, K]) when given (overwritten);
// dw[K, D] +=, db[D] += (the replicated bias: the same on every rank).
void row_parallel_backward(TpContext& tp, float* dx, float* dout, const float* x, Weight w, Weight b,
                           const float* gelu_pre, int N, int K, int D, WeightGradQueue* defer = nullptr);

// ---- nn.Linear layout (Llama): weights [out, in], no biases ---------------------
// The same splits with the weight transposed: a column-parallel weight holds rows
// (outputs) [OC, K], a row-parallel one columns (inputs) [D, K].

// out[N, OC] (row stride ldo) = x[N, K] w[OC, K]^T. x whole (gather_sequence first).
void linear_nt_forward(kernels::Device& dev, float* out, int64_t ldo, const float* x, Weight w, int N, int K,
                       int OC);
// dx[N, K] = dout w (overwritten), or += when accumulate; dw[OC, K] += dout^T x.
// dout[N, OC] has row stride lddout.
void linear_nt_backward(kernels::Device& dev, float* dx, bool accumulate, const float* dout, int64_t lddout,
                        const float* x, Weight w, int N, int K, int OC, WeightGradQueue* defer = nullptr);

// out[Nr, D] = residual[Nr, D] + sum over ranks of x[N, K] w[D, K]^T; residual may be
// null (nothing added). partial: [N, D] scratch (used under SP only). out may not
// alias residual.
void row_parallel_nt_forward(TpContext& tp, float* out, const float* x, Weight w, const float* residual, int N,
                             int K, int D, float* partial);
// dout[N, D] with this rank's rows filled (all-gathered in place first under SP).
// dx[N, K] = dout w (overwritten); dw[D, K] += dout^T x.
void row_parallel_nt_backward(TpContext& tp, float* dx, float* dout, const float* x, Weight w, int N, int K, int D,
                              WeightGradQueue* defer = nullptr);

}  // namespace troupe::model::layers
