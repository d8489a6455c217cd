#include "model/qkv_pieces.h"

namespace troupe::model {

void qkv_pieces_forward(kernels::Device& dev, float* qkv, const float* ln1, const float* w, const float* b,
                        const float* ones, int N, int D, int Dt) {
  const int ld = 3 * Dt;
  // Every row starts as the bias (ones[N, 1] b[1, 3Dt] is exact), then each piece adds in.
  dev.gemm(false, false, N, ld, 1, 1.0f, ones, 1, b, ld, 0.0f, qkv, ld);
  for (int j = 0; j < 3; ++j)
    dev.gemm(false, false, N, Dt, D, 1.0f, ln1, D, w + int64_t(j) * D * Dt, Dt, 1.0f, qkv + j * Dt, ld);
}

void qkv_pieces_backward(kernels::Device& dev, float* dln1, float* dw, float* db, const float* dqkv, const float* ln1,
                         const float* w, const float* ones, int N, int D, int Dt) {
  const int ld = 3 * Dt;
  for (int j = 0; j < 3; ++j) {
    const float* dj = dqkv + j * Dt;
    const float* wj = w + int64_t(j) * D * Dt;
    dev.gemm(false, true, N, D, Dt, 1.0f, dj, ld, wj, Dt, j == 0 ? 0.0f : 1.0f, dln1, D);
    if (dw) dev.gemm(true, false, D, Dt, N, 1.0f, ln1, D, dj, ld, 1.0f, dw + int64_t(j) * D * Dt, Dt);
  }
  dev.gemm(true, false, 1, ld, N, 1.0f, ones, 1, dqkv, ld, 1.0f, db, ld);
}

}  // namespace troupe::model
