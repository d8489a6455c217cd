// Grouped-query attention on the CUDA device: attention's batched-GEMM scheme
// (cuda_attention.cpp) with NH query heads over KV key/value heads, G = NH / KV.
// q is repacked to [B, NH, T, hs] and k, v to [B, KV, T, hs], each once. Because query
// head h = kv G + g reads kv head kv, the G query heads of one (b, kv) are adjacent in
// the q blocks: Q_(b,kv) is one [G T, hs] matrix, and its scores for all G heads,
// att[b, kv G .. kv G + G - 1] = [G T, T], are adjacent too. So every product is one
// strided-batched GEMM over the B KV pairs, reading K_(b,kv) and V_(b,kv) in place:
//   forward:  S = Q K^T [G T, T];  att = masked softmax(S / sqrt(hs));  O = P V [G T, hs]
//   backward: dP = dO V^T;  dS = P (dP - rowsum(P dP)) on the mask;  dQ = scale dS K;
//             dK = scale dS^T Q and dV = P^T dO, each [T, hs] with the inner dimension
//             G T: the sum over the group's query heads happens inside one GEMM's
//             fp32 accumulation (fixed by shape and cuBLAS's fixed algorithm choice, so
//             deterministic), never by atomics or by copying k and v per query head.
// With KV = NH (G = 1) the calls are exactly attention_forward / backward's.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_device.h"

namespace troupe::kernels::cuda {
namespace {

void check_heads(const char* what, int NH, int KV) {
  if (KV <= 0 || NH % KV != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads do not divide into KV = " + std::to_string(KV) + " groups");
}

}  // namespace

void CudaDevice::gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B,
                                       int T, int NH, int KV, int hs, const DropoutMask& drop) {
  check_heads("gqa_attention_forward", NH, KV);
  make_current();
  const GemmType t = options_.gemm;
  const size_t es = gemm_type_size(t);
  const int G = NH / KV;
  const int64_t ld = int64_t(NH + 2 * KV) * hs, C = int64_t(NH) * hs;
  const int64_t nq = int64_t(B) * T * C, nkv = int64_t(B) * T * KV * hs;
  const int64_t TT = int64_t(T) * T, Ths = int64_t(T) * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  // kAttnRows: q [B, NH, T, hs] | k, v [B, KV, T, hs] (gemm type) | o [B, NH, T, hs] (fp32)
  char* rows = static_cast<char*>(scratch(kAttnRows, size_t(nq + 2 * nkv) * es + size_t(nq) * sizeof(float)));
  void* q = rows;
  void* k = rows + nq * es;
  void* v = rows + (nq + nkv) * es;
  auto* o = reinterpret_cast<float*>(rows + (nq + 2 * nkv) * es);
  launch::columns_to_heads(q, t, qkv, ld, B, T, NH, hs, compute_);
  launch::columns_to_heads(k, t, qkv + C, ld, B, T, KV, hs, compute_);
  launch::columns_to_heads(v, t, qkv + C + int64_t(KV) * hs, ld, B, T, KV, hs, compute_);
  // att[b, kv group] [G T, T] (raw scores) = q[b, kv group] [G T, hs] * k[b, kv]^T
  gemm_rm(false, true, G * T, T, hs, 1.0f, q, hs, G * Ths, k, hs, Ths, 0.0f, att, T, G * TT, B * KV);
  void* p_gemm = nullptr;  // the P V operand (bf16, or dropped), as in attention_forward
  if (t == GemmType::kBf16 || drop.on()) p_gemm = scratch(kAttnBig1, size_t(B) * NH * TT * es);
  launch::attention_softmax_forward(att, p_gemm, t, doc_start, B, NH, T, scale, drop, compute_);
  const void* P = p_gemm ? static_cast<const void*>(p_gemm) : static_cast<const void*>(att);
  // o[b, kv group] [G T, hs] = P [G T, T] * v[b, kv] [T, hs]
  gemm_rm(false, false, G * T, hs, T, 1.0f, P, T, G * TT, v, hs, Ths, 0.0f, o, hs, G * Ths, B * KV);
  launch::heads_to_columns(out, C, o, B, T, NH, hs, compute_);
}

void CudaDevice::gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                        const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                                        const DropoutMask& drop) {
  check_heads("gqa_attention_backward", NH, KV);
  make_current();
  const GemmType t = options_.gemm;
  const size_t es = gemm_type_size(t);
  const int G = NH / KV;
  const int64_t ld = int64_t(NH + 2 * KV) * hs, C = int64_t(NH) * hs;
  const int64_t nq = int64_t(B) * T * C, nkv = int64_t(B) * T * KV * hs;
  const int64_t TT = int64_t(T) * T, Ths = int64_t(T) * hs, BHTT = int64_t(B) * NH * TT;
  const float scale = 1.0f / std::sqrt(float(hs));
  // kAttnRows: q, dO [B, NH, T, hs] | k, v [B, KV, T, hs] (gemm type) | dq [B, NH, T, hs] |
  // dk, dv [B, KV, T, hs] (fp32)
  char* rows = static_cast<char*>(
      scratch(kAttnRows, size_t(2 * nq + 2 * nkv) * es + size_t(nq + 2 * nkv) * sizeof(float)));
  void* q = rows;
  void* dO = rows + nq * es;
  void* k = rows + 2 * nq * es;
  void* v = rows + (2 * nq + nkv) * es;
  auto* dq = reinterpret_cast<float*>(rows + (2 * nq + 2 * nkv) * es);
  float* dk = dq + nq;
  float* dv = dk + nkv;
  launch::columns_to_heads(q, t, qkv, ld, B, T, NH, hs, compute_);
  launch::columns_to_heads(k, t, qkv + C, ld, B, T, KV, hs, compute_);
  launch::columns_to_heads(v, t, qkv + C + int64_t(KV) * hs, ld, B, T, KV, hs, compute_);
  launch::columns_to_heads(dO, t, dout, C, B, T, NH, hs, compute_);
  auto* dP = static_cast<float*>(scratch(kAttnBig2, size_t(BHTT) * sizeof(float)));
  // dP[b, kv group] [G T, T] = dO [G T, hs] * v[b, kv]^T
  gemm_rm(false, true, G * T, T, hs, 1.0f, dO, hs, G * Ths, v, hs, Ths, 0.0f, dP, T, G * TT, B * KV);
  void* dS = scratch(kAttnBig3, size_t(BHTT) * es);
  void* p_gemm = nullptr;  // the P^T dO operand, as in forward
  if (t == GemmType::kBf16 || drop.on()) p_gemm = scratch(kAttnBig1, size_t(BHTT) * es);
  launch::attention_softmax_backward(dS, t, p_gemm, att, dP, doc_start, B, NH, T, drop, compute_);
  const void* P = p_gemm ? static_cast<const void*>(p_gemm) : static_cast<const void*>(att);
  // dq [G T, hs] = scale dS [G T, T] * k [T, hs]
  gemm_rm(false, false, G * T, hs, T, scale, dS, T, G * TT, k, hs, Ths, 0.0f, dq, hs, G * Ths, B * KV);
  // dk [T, hs] = scale dS^T [T, G T] * q [G T, hs];  dv [T, hs] = P^T [T, G T] * dO [G T, hs]
  gemm_rm(true, false, T, hs, G * T, scale, dS, T, G * TT, q, hs, G * Ths, 0.0f, dk, hs, Ths, B * KV);
  gemm_rm(true, false, T, hs, G * T, 1.0f, P, T, G * TT, dO, hs, G * Ths, 0.0f, dv, hs, Ths, B * KV);
  launch::heads_to_columns(dqkv, ld, dq, B, T, NH, hs, compute_);
  launch::heads_to_columns(dqkv + C, ld, dk, B, T, KV, hs, compute_);
  launch::heads_to_columns(dqkv + C + int64_t(KV) * hs, ld, dv, B, T, KV, hs, compute_);
}

}  // namespace troupe::kernels::cuda
