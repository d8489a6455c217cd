// The column-parallel QKV projection of a tensor-parallel rank. The rank's c_attn
// weight is held as three pieces Wq_t, Wk_t, Wv_t, each [D, Dt] row-major (its heads'
// columns of q, k and v; model/param_registry.h), and its bias as one [3Dt] vector
// b = bq_t | bk_t | bv_t. The attention kernel wants qkv[N, 3Dt] = q_t | k_t | v_t per
// token, so each piece's GEMM writes its own column block of qkv (ldc = 3Dt).
// `ones` is a device vector of at least N ones: the bias goes in and its gradient
// comes out as rank-1 GEMMs (K = 1 or M = 1), so everything stays a Device primitive.
#pragma once

#include "kernels/device.h"

namespace troupe::model {

// qkv[N, 3Dt] = b + ln1[N, D] [Wq | Wk | Wv]
void qkv_pieces_forward(kernels::Device& dev, float* qkv, const float* ln1, const float* w,
                        const float* b, const float* ones, int N, int D, int Dt);

// dln1[N, D] = sum_j dqkv[:, j-th block] W_j^T (overwritten);
// dW_j[D, Dt] += ln1^T dqkv[:, j-th block] (not when dw is null);  db[3Dt] += column sums of dqkv.
void qkv_pieces_backward(kernels::Device& dev, float* dln1, float* dw, float* db, const float* dqkv,
                         const float* ln1, const float* w, const float* ones, int N, int D, int Dt);

}  // namespace troupe::model
