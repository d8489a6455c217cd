// The CPU emulation's cuBLAS: column-major GEMMs by definition, with cuBLAS's argument
// checks (a leading dimension below the stored rows is CUBLAS_STATUS_INVALID_VALUE), bf16
// operands read as the tensor cores read them, products accumulated in fp32 in k order.
// With beta = 0, C is not read (it may hold NaN), as in cuBLAS.
#include <cublas_v2.h>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float load(const void* p, cudaDataType_t t, long long i) {
  return t == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}

// The combinations troupe uses: bf16 inputs with an fp32 or bf16 output, or fp32 throughout.
bool supported(cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct, cublasComputeType_t compute) {
  if (at != bt) return false;
  if (at == CUDA_R_16BF) return compute == CUBLAS_COMPUTE_32F && (ct == CUDA_R_32F || ct == CUDA_R_16BF);
  return at == CUDA_R_32F && ct == CUDA_R_32F &&
         (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC);
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void* w, size_t bytes) {
  return (w && bytes % 256 == 0) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                                          long long stride_a, const void* B, cudaDataType_t bt, int ldb,
                                          long long stride_b, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                          long long stride_c, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
  if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
  troupe_emu::DeviceAccess device;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < k; ++l) {
          const long long ai = b * stride_a + (ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda);
          const long long bi = b * stride_b + (tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);
          acc += load(A, at, ai) * load(B, bt, bi);
        }
        const long long ci = b * stride_c + i + (long long)j * ldc;
        const float v = be != 0.0f ? al * acc + be * load(C, ct, ci) : al * acc;
        if (ct == CUDA_R_16BF)
          static_cast<__nv_bfloat16*>(C)[ci] = __float2bfloat16_rn(v);
        else
          static_cast<float*>(C)[ci] = v;
      }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                    compute, algo);
}
