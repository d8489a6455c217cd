// cuBLAS behind one call: row-major (strided-batched) GEMM with fp32 accumulation and
// an fp32 output, operands in bf16 or fp32. Owns the handle and a fixed workspace
// (cublasSetWorkspace), bound to one stream: with a fixed workspace and stream, cuBLAS
// picks the same algorithm for the same shapes, so results repeat bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch.h"

struct cublasContext;

namespace troupe::kernels::cuda {

class Blas {
 public:
  Blas(cudaStream_t stream, size_t workspace_bytes);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // For b < batch (row-major, element offsets b * stride*):
  //   C_b[M, N] = alpha * op(A_b)[M, K] * op(B_b)[K, N] + beta * C_b
  // op = transpose when trans_* is set (A_b then stored [K, M] with row stride lda).
  // A and B hold `type` elements; C is fp32; products accumulate in fp32 (bf16: tensor
  // cores; fp32: CUBLAS_COMPUTE_32F_PEDANTIC, no TF32).
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int64_t lda,
            int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, float beta, float* C,
            int64_t ldc, int64_t stride_c, int batch, GemmType type);

  cublasContext* handle() const { return handle_; }

 private:
  cublasContext* handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace troupe::kernels::cuda
