// Attention on the CUDA device as batched GEMMs + a masked row softmax (docs/gpu.md
// says why this design rather than a fused flash-style kernel). Per (b, h), with
// Q, K, V [T, hs] repacked per head (bf16 or fp32, see CudaDevice's precision):
//   forward:  S = Q K^T -> att (fp32, in place);  att = masked softmax(S / sqrt(hs));
//             O = P V (P = att, as bf16 when the GEMMs are bf16);  out[B, T, C] <- O
//   backward: dP = dO V^T (fp32);  dS = P (dP - rowsum(P dP)) on the mask;
//             dQ = scale dS K;  dK = scale dS^T Q;  dV = P^T dO;  dqkv <- dQ | dK | dV
// Attention dropout (kernels/dropout.h) lives in the softmax kernels: the P V and
// P^T dO operands are the dropped probabilities and dP is masked first; att keeps
// the undropped ones.
// Masked pairs cost GEMM flops (the whole T x T block is multiplied) but keep every
// product one large strided-batched cuBLAS call, as the CPU device does per head.
#include <cmath>

#include "kernels/cuda/cuda_device.h"

namespace troupe::kernels::cuda {

void CudaDevice::attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T,
                                   int C, int NH, const DropoutMask& drop) {
  make_current();
  const GemmType t = options_.gemm;
  const size_t es = gemm_type_size(t);
  const int hs = C / NH;
  const int64_t BTC = int64_t(B) * T * C, TT = int64_t(T) * T, Ths = int64_t(T) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  // kAttnRows: q | k | v (gemm type, [B, NH, T, hs] each) | o (fp32 [B, NH, T, hs])
  char* rows = static_cast<char*>(scratch(kAttnRows, size_t(BTC) * (3 * es + sizeof(float))));
  void* q = rows;
  void* k = rows + BTC * es;
  void* v = rows + 2 * BTC * es;
  auto* o = reinterpret_cast<float*>(rows + 3 * BTC * es);
  launch::qkv_to_heads(q, k, v, t, qkv, B, T, C, NH, compute_);
  // att[bh] (raw scores) = q[bh] [T, hs] * k[bh]^T
  gemm_rm(false, true, T, T, hs, 1.0f, q, hs, Ths, k, hs, Ths, 0.0f, att, T, TT, B * NH);
  // The P V operand: bf16 probabilities, or dropped ones (fp32 too), in kAttnBig1; att itself otherwise.
  void* p_gemm = nullptr;
  if (t == GemmType::kBf16 || drop.on()) p_gemm = scratch(kAttnBig1, size_t(B) * NH * TT * es);
  launch::attention_softmax_forward(att, p_gemm, t, doc_start, B, NH, T, scale, drop, compute_);
  const void* P = p_gemm ? static_cast<const void*>(p_gemm) : static_cast<const void*>(att);
  // o[bh] [T, hs] = P[bh] [T, T] * v[bh] [T, hs]
  gemm_rm(false, false, T, hs, T, 1.0f, P, T, TT, v, hs, Ths, 0.0f, o, hs, Ths, B * NH);
  launch::heads_to_rows(out, C, o, B, T, C, NH, compute_);
}

void CudaDevice::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                    const int32_t* doc_start, int B, int T, int C, int NH, const DropoutMask& drop) {
  make_current();
  const GemmType t = options_.gemm;
  const size_t es = gemm_type_size(t);
  const int hs = C / NH;
  const int64_t BTC = int64_t(B) * T * C, TT = int64_t(T) * T, Ths = int64_t(T) * hs, BHTT = int64_t(B) * NH * TT;
  const float scale = 1.0f / std::sqrt(float(hs));
  // kAttnRows: q | k | v | dO (gemm type) | dq | dk | dv (fp32), each [B, NH, T, hs]
  char* rows = static_cast<char*>(scratch(kAttnRows, size_t(BTC) * (4 * es + 3 * sizeof(float))));
  void* q = rows;
  void* k = rows + BTC * es;
  void* v = rows + 2 * BTC * es;
  void* dO = rows + 3 * BTC * es;
  auto* dq = reinterpret_cast<float*>(rows + 4 * BTC * es);
  float* dk = dq + BTC;
  float* dv = dk + BTC;
  launch::qkv_to_heads(q, k, v, t, qkv, B, T, C, NH, compute_);
  launch::rows_to_heads(dO, t, dout, B, T, C, NH, compute_);
  auto* dP = static_cast<float*>(scratch(kAttnBig2, size_t(BHTT) * sizeof(float)));
  // dP[bh] [T, T] = dO[bh] [T, hs] * v[bh]^T
  gemm_rm(false, true, T, T, hs, 1.0f, dO, hs, Ths, v, hs, Ths, 0.0f, dP, T, TT, B * NH);
  void* dS = scratch(kAttnBig3, size_t(BHTT) * es);
  void* p_gemm = nullptr;  // the P^T dO operand, as in forward
  if (t == GemmType::kBf16 || drop.on()) p_gemm = scratch(kAttnBig1, size_t(BHTT) * es);
  launch::attention_softmax_backward(dS, t, p_gemm, att, dP, doc_start, B, NH, T, drop, compute_);
  const void* P = p_gemm ? static_cast<const void*>(p_gemm) : static_cast<const void*>(att);
  // dq[bh] = scale * dS [T, T] * k [T, hs];  dk[bh] = scale * dS^T * q;  dv[bh] = P^T * dO
  gemm_rm(false, false, T, hs, T, scale, dS, T, TT, k, hs, Ths, 0.0f, dq, hs, Ths, B * NH);
  gemm_rm(true, false, T, hs, T, scale, dS, T, TT, q, hs, Ths, 0.0f, dk, hs, Ths, B * NH);
  gemm_rm(true, false, T, hs, T, 1.0f, P, T, TT, dO, hs, Ths, 0.0f, dv, hs, Ths, B * NH);
  launch::heads_to_rows(dqkv, 3 * int64_t(C), dq, B, T, C, NH, compute_);
  launch::heads_to_rows(dqkv + C, 3 * int64_t(C), dk, B, T, C, NH, compute_);
  launch::heads_to_rows(dqkv + 2 * int64_t(C), 3 * int64_t(C), dv, B, T, C, NH, compute_);
}

}  // namespace troupe::kernels::cuda
