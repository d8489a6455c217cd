#include "kernels/cuda/blas.h"

#include <cublas_v2.h>

#include <climits>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace troupe::kernels::cuda {

Blas::Blas(cudaStream_t stream, size_t workspace_bytes) {
  TROUPE_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    TROUPE_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    TROUPE_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
    TROUPE_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes));
    TROUPE_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    if (workspace_) cudaFree(workspace_);
    cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() {
  cublasDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
}

void Blas::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int64_t lda, int64_t stride_a,
                const void* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c,
                int batch, GemmType type) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  if (lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    throw CudaError("Blas::gemm: leading dimension above INT_MAX (lda " + std::to_string(lda) + ", ldb " +
                    std::to_string(ldb) + ", ldc " + std::to_string(ldc) + ")");
  const cudaDataType_t ab = type == GemmType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = type == GemmType::kBf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    TROUPE_CUBLAS_CHECK(cublasGemmEx(handle_, opb, opa, N, M, K, &alpha, B, ab, int(ldb), A, ab, int(lda), &beta, C,
                                     CUDA_R_32F, int(ldc), compute, CUBLAS_GEMM_DEFAULT));
  } else {
    TROUPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, opb, opa, N, M, K, &alpha, B, ab, int(ldb), stride_b, A,
                                                   ab, int(lda), stride_a, &beta, C, CUDA_R_32F, int(ldc), stride_c,
                                                   batch, compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace troupe::kernels::cuda
