// Host-side launchers of the CUDA kernels (one .cu file per concern). CudaDevice
// (cuda_device.h) calls these; tests and benchmarks go through CudaDevice. Every
// launcher enqueues on `stream` and returns at once; shapes follow kernels/device.h.
//
// Determinism: no launcher uses atomics. Every reduction has a fixed tree that
// depends on the problem size only (see each .cu file), so equal inputs give equal
// bits run to run on the same GPU model.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device.h"

namespace troupe::kernels::cuda {

// Element type of GEMM operands: bf16 (mixed precision, fp32 accumulation) or fp32.
enum class GemmType { kBf16, kF32 };
inline size_t gemm_type_size(GemmType t) { return t == GemmType::kBf16 ? 2 : 4; }

namespace launch {

// ---- convert.cu -----------------------------------------------------------------
// dst[rows, cols] (packed) = bf16(src[rows, cols] with row stride ld), round to nearest even.
void f32_to_bf16_2d(__nv_bfloat16* dst, const float* src, int64_t rows, int64_t cols,
                    int64_t ld, cudaStream_t s);
// Packed copy of a strided fp32 matrix: dst[rows, cols] = src (row stride ld).
void f32_pack_2d(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld,
                 cudaStream_t s);

// ---- elementwise.cu -------------------------------------------------------------
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s);
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s);
void scale(float* x, int64_t n, float f, cudaStream_t s);
// Device::dropout's contract (kernels/dropout.h).
void dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols, int T,
             const DropoutMask& drop, cudaStream_t s);
// out[N, OC] = (residual ? residual : 0) + (bias ? bias[c] : 0); out may alias residual.
void bias_residual_init(float* out, const float* bias, const float* residual, int N, int OC,
                        cudaStream_t s);

// ---- reduce.cu ------------------------------------------------------------------
// Column reductions over N rows in a fixed tree: rows are cut into chunks of
// kColumnChunkRows, each chunk's column sums go to scratch, and the chunks are then
// added in chunk order. scratch needs column_reduce_scratch(N, C) floats.
constexpr int kColumnChunkRows = 256;
int64_t column_reduce_scratch(int N, int C);
// dbias[OC] += column sums of dout[N, OC].
void bias_backward(float* dbias, const float* dout, int N, int OC, float* scratch, cudaStream_t s);

// ---- layernorm.cu ---------------------------------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, float eps,
                       cudaStream_t s);
// scratch: 2 * column_reduce_scratch(N, C) floats.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t s);

// ---- rmsnorm.cu -----------------------------------------------------------------
// out[N, C] = x * rstd * weight, rstd[N] = 1 / sqrt(mean(x^2) + eps) (one warp per row).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     cudaStream_t s);
// dinp[N, C] +=, dweight[C] += (the column reduction's fixed tree);
// scratch: column_reduce_scratch(N, C) floats.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t s);

// ---- rope.cu --------------------------------------------------------------------
// In place on `heads` heads of hs per row of x[N, ld]; cos, sin [max_positions, hs/2];
// backward rotates by the negative angle (kernels/device.h states the pairing).
void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                  int64_t ld, cudaStream_t s);
void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N, int heads, int hs,
                   int64_t ld, cudaStream_t s);

// ---- swiglu.cu ------------------------------------------------------------------
// out = silu(gate) * up;  dgate = dout up silu'(gate), dup = dout silu(gate) (n values;
// dgate may alias gate, dup may alias up).
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, cudaStream_t s);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n,
                     cudaStream_t s);

// ---- embedding.cu ---------------------------------------------------------------
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int N, int C, cudaStream_t s);
// Bytes of scratch embedding_backward needs for N tokens.
size_t embedding_backward_scratch_bytes(int N);
// Deterministic: the (row, n) pairs are stably sorted by row, and each distinct row
// adds its tokens' gradients in increasing n, exactly the CPU kernel's order.
// vocab_rows >= 0: a vocabulary shard (rows [vocab_begin, vocab_begin + vocab_rows) of
// the table; other tokens add nothing), and dwpe may be null.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int N, int C, void* scratch,
                        size_t scratch_bytes, cudaStream_t s, int vocab_begin = 0, int vocab_rows = -1);
// out[N, C] = (token in the shard ? wte[token - vocab_begin] : 0) + (wpe ? wpe[position] : 0).
void embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                             const float* wpe, int N, int C, int vocab_begin, int vocab_rows, cudaStream_t s);

// ---- attention.cu ---------------------------------------------------------------
// qkv[B, T, 3C] (fp32) -> q, k, v each [B, NH, T, hs] of type t (packed per head).
void qkv_to_heads(void* q, void* k, void* v, GemmType t, const float* qkv, int B, int T,
                  int C, int NH, cudaStream_t s);
// src[B, T, C] (fp32, row stride C) -> dst[B, NH, T, hs] of type t.
void rows_to_heads(void* dst, GemmType t, const float* src, int B, int T, int C, int NH,
                   cudaStream_t s);
// src[B, NH, T, hs] (fp32) -> dst[b, t, h * hs + i] with row stride ld (C, or 3C into dqkv).
void heads_to_rows(float* dst, int64_t ld, const float* src, int B, int T, int C, int NH,
                   cudaStream_t s);
// In place on att[B, NH, T, T] holding raw scores Q K^T: row t becomes
// softmax(scale * s[doc_start .. t]) there and 0 elsewhere. When p_gemm is given it
// also receives the operand of P V as type t: the probabilities, dropped by `drop`
// when drop.on() (kernels/dropout.h; head h of row (b, h, t) is global head
// drop.first_col + h). p_gemm may be null only for fp32 without dropout (att is the operand).
void attention_softmax_forward(float* att, void* p_gemm, GemmType t, const int32_t* doc_start, int B, int NH, int T,
                               float scale, const DropoutMask& drop, cudaStream_t s);
// ds[B, NH, T, T] (type t) = p * (dp' - sum_j p_j dp'_j) on [doc_start, t], 0 elsewhere,
// from att (fp32 probabilities) and dp (fp32), dp' = dp masked and scaled by `drop`
// (dp itself without dropout). When p_gemm is given it also receives the operand of
// P^T dO as type t (the dropped probabilities with dropout); null only as in forward.
void attention_softmax_backward(void* ds, GemmType t, void* p_gemm, const float* att, const float* dp,
                                const int32_t* doc_start, int B, int NH, int T, const DropoutMask& drop,
                                cudaStream_t s);

// ---- gqa_attention.cu -----------------------------------------------------------
// H heads of hs starting at column 0 of src[B, T, ld] (fp32) -> dst[B, H, T, hs] of type t.
void columns_to_heads(void* dst, GemmType t, const float* src, int64_t ld, int B, int T, int H, int hs,
                      cudaStream_t s);
// src[B, H, T, hs] (fp32) -> H heads of hs starting at column 0 of dst[B, T, ld].
void heads_to_columns(float* dst, int64_t ld, const float* src, int B, int T, int H, int hs, cudaStream_t s);

// ---- crossentropy.cu ------------------------------------------------------------
// Vocabulary-parallel pieces. A shard holds columns [vocab_begin, vocab_begin + V) of
// the vocabulary in logits[N, ld]. partials[3, N] receives per row: the shard's max
// logit, sum_j exp(logit_j - max) over the shard, and the target's logit when the
// target lies in the shard (0 otherwise). Masked rows get (0, 0, 0).
void crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                           const float* mask, int N, int V, int ld, int vocab_begin,
                           cudaStream_t s);
// partials[S, 3, N] from S shards (in shard order) -> lse[N] and
// losses[N] = mask * (lse - target logit); masked rows get 0 and 0.
void crossentropy_combine(float* losses, float* lse, const float* partials, int S,
                          const float* mask, int N, cudaStream_t s);
// dlogits[N, ld] = mask * scale * (exp(logit - lse) - [vocab_begin + j == target]) on the
// shard's V columns, 0 on columns V..ld. dlogits may alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, const float* mask, float scale, int N, int V,
                           int ld, int vocab_begin, cudaStream_t s);

// ---- optimizer.cu ---------------------------------------------------------------
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args, cudaStream_t s);
// Blocks of kSumSquaresBlock elements; each block's sum (double, fixed tree) goes to
// scratch, then one thread adds the blocks in order into *result.
constexpr int64_t kSumSquaresBlock = int64_t(1) << 16;
int64_t sum_squares_scratch(int64_t n);  // doubles
// adamw_update fused with the sums of the update-to-weight ratio (Device::
// adamw_update_norms): blocks of kSumSquaresBlock elements, each block's two sums
// (update, weight; double, fixed tree) to scratch[2 b], scratch[2 b + 1], then one
// thread adds the blocks in order into results[0] (update) and results[1] (weight).
int64_t adamw_norms_scratch(int64_t n);  // blocks: the scratch holds 2 doubles each
void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args,
                        double* results, double* scratch, cudaStream_t s);
void sum_squares(double* result, const float* x, int64_t n, double* scratch, cudaStream_t s);

// ---- probe.cu -------------------------------------------------------------------
// cudaSuccess when this build's kernels can run on the current device (a kernel
// image or PTX for its architecture is in the binary).
cudaError_t probe_kernel_image();

}  // namespace launch
}  // namespace troupe::kernels::cuda
