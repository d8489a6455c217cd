// Error checks for CUDA runtime and cuBLAS calls: a failure throws CudaError naming
// the call, the source line and the library's own error name and text. Kernel
// launches are followed by TROUPE_CUDA_LAUNCHED() (cudaGetLastError), so a bad
// launch configuration is reported at the launch, not at the next synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace troupe::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace troupe::kernels::cuda

#define TROUPE_CUDA_CHECK(call)                                                             \
  do {                                                                                      \
    const cudaError_t troupe_e_ = (call);                                                   \
    if (troupe_e_ != cudaSuccess)                                                           \
      ::troupe::kernels::cuda::throw_cuda_error(troupe_e_, #call, __FILE__, __LINE__);      \
  } while (0)

#define TROUPE_CUBLAS_CHECK(call)                                                           \
  do {                                                                                      \
    const int troupe_s_ = int(call);                                                        \
    if (troupe_s_ != 0) ::troupe::kernels::cuda::throw_cublas_error(troupe_s_, #call, __FILE__, __LINE__); \
  } while (0)

#define TROUPE_CUDA_LAUNCHED() TROUPE_CUDA_CHECK(cudaGetLastError())
