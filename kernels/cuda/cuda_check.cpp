#include "kernels/cuda/cuda_check.h"

#include <cublas_v2.h>

namespace troupe::kernels::cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: error " +
                  std::to_string(int(e)) + " " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  const auto s = cublasStatus_t(status);
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: cuBLAS status " +
                  std::to_string(status) + " " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s));
}

}  // namespace troupe::kernels::cuda
