// The CPU kernels as free functions over a ThreadPool; CpuDevice forwards to them.
// Shapes and semantics are documented on the Device interface (kernels/device.h).
//
// Partitioning (why results do not depend on the thread count):
//   row kernels (layernorm forward, cross-entropy, embedding forward, elementwise)
//   give each row or element to one participant and compute it the same way whatever
//   the partition; attention gives each (batch row, head) pair to one participant,
//   which runs the same single-threaded GEMMs for it whatever the partition (grouped-
//   query attention's backward gives each (batch row, kv head) pair to one, which adds
//   its query heads' dk and dv in head order);
//   reductions over rows (bias, LayerNorm and embedding gradients) are split over
//   columns instead: each participant owns whole columns and adds rows in order 0..N-1;
//   sum_squares adds fixed 64 Ki-element blocks (partials in double) in block order.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device.h"
#include "kernels/dropout.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels::cpu {

// Per-participant scratch that kernels may grow on first use (never in steady state).
struct Scratch {
  std::vector<std::vector<float>> per_thread;  // one per participant
  std::vector<double> partials;                // sum_squares block partials
  std::vector<double> update_partials;         // adamw_update_norms block partials, 2 per block
  std::vector<double> piece_partials;          // sum_squares_split: one per (block, piece) segment
  std::vector<int64_t> block_pieces;           // sum_squares_split: each block's first piece and segment
  struct AdamWBlock {
    size_t piece;
    int64_t lo, hi;
  };
  std::vector<AdamWBlock> adamw_blocks;        // adamw_update_pieces: every piece's blocks
  float* thread_floats(int p, size_t n) {
    auto& v = per_thread[size_t(p)];
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

void embedding_forward(ThreadPool& pool, float* out, const int32_t* tokens,
                       const int32_t* positions, const float* wte, const float* wpe, int N, int C);
void embedding_backward(ThreadPool& pool, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, const int32_t* positions, int N, int C);

void layernorm_forward(ThreadPool& pool, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, float eps);
void layernorm_backward(ThreadPool& pool, float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C);

// RMSNorm (kernels/cpu/rmsnorm.cpp): out[N, C] = x * rstd * weight, rstd[N] =
// 1 / sqrt(mean(x^2) + eps) saved;  dinp[N, C] +=, dweight[C] +=.
void rmsnorm_forward(ThreadPool& pool, float* out, float* rstd, const float* inp, const float* weight, int N,
                     int C, float eps);
void rmsnorm_backward(ThreadPool& pool, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);

void linear_forward(ThreadPool& pool, float* out, float* gelu_out, const float* inp,
                    const float* weight, const float* bias, const float* residual, int N, int C,
                    int OC);
void linear_backward(ThreadPool& pool, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     const float* gelu_pre, int N, int C, int OC);
// dbias[OC] += column sums of dout[N, OC] (rows added in order).
void bias_backward(ThreadPool& pool, float* dbias, const float* dout, int N, int OC);

// The backward of the softmax of one attention row (exp_rows.h's softmax_row):
// ds[i] = p[i] * (dp[i] - sum_j p[j] dp[j]).
void softmax_row_backward(float* ds, const float* p, const float* dp, int n);

void attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att,
                       const float* qkv, const int32_t* doc_start, int B, int T, int C, int NH,
                       const DropoutMask& drop);
void attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout,
                        const float* qkv, const float* att, const int32_t* doc_start, int B,
                        int T, int C, int NH, const DropoutMask& drop);

// How the attention kernels cut their work; the defaults are what the device runs, the
// rest are bench/attention_bench's baselines and the tests' edge cases.
struct AttentionPlan {
  int block = 0;              // rows of a causal block (cpu/causal_blocks.h): 0 for
                              // causal_block(hs); T or more: one block of whole rows
  bool process_gemm = false;  // every product through the process's sgemm, never the
                              // small AVX-512 kernel (cpu/head_loop.h)
};
// Grouped-query attention (cpu/gqa_attention.cpp): qkv[B, T, (NH + 2 KV) hs] -> out[B, T,
// NH hs], att[B, NH, T, T]; query head h reads kv head h / (NH / KV). Forward split over
// (b, query head), backward over (b, kv head) with the group's heads added in order.
void gqa_attention_forward(ThreadPool& pool, Scratch& scratch, float* out, float* att, const float* qkv,
                           const int32_t* doc_start, int B, int T, int NH, int KV, int hs, const DropoutMask& drop,
                           const AttentionPlan& plan = {});
void gqa_attention_backward(ThreadPool& pool, Scratch& scratch, float* dqkv, const float* dout, const float* qkv,
                            const float* att, const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                            const DropoutMask& drop, const AttentionPlan& plan = {});

// Dropout (cpu/dropout.cpp; kernels/dropout.h). dropout: Device::dropout.
// dropout_attention_row: dst[0, T) = src masked and scaled on [s0, t] (the row of query t
// of head key `key`, sample slot `slot`), 0 elsewhere; dst may equal src.
void dropout(ThreadPool& pool, float* out, const float* in, const float* add, int64_t first_row, int64_t rows,
             int cols, int T, const DropoutMask& m);
void dropout_attention_row(float* dst, const float* src, int s0, int t, int T, const DropoutMask& m, uint64_t key,
                           int64_t slot);

// Rotary position embedding in place (cpu/rope.cpp): `heads` heads of hs per row of x[N,
// ld]; cos, sin [max_positions, hs/2]; backward rotates by the negative angle.
void rope_forward(ThreadPool& pool, float* x, const int32_t* positions, const float* cos, const float* sin, int N,
                  int heads, int hs, int64_t ld);
void rope_backward(ThreadPool& pool, float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                   int heads, int hs, int64_t ld);

// SwiGLU's activation (cpu/swiglu.cpp): out = silu(gate) * up over n values; backward
// dgate = dout up silu'(gate), dup = dout silu(gate) (dgate may alias gate, dup up).
void swiglu_forward(ThreadPool& pool, float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(ThreadPool& pool, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);

void gelu_forward(ThreadPool& pool, float* out, const float* inp, int64_t n);
void gelu_backward(ThreadPool& pool, float* dinp, const float* inp, const float* dout, int64_t n);

void add(ThreadPool& pool, float* out, const float* a, const float* b, int64_t n);
void scale(ThreadPool& pool, float* x, int64_t n, float s);

void crossentropy_forward(ThreadPool& pool, float* losses, float* lse, const float* logits,
                          const int32_t* targets, const float* mask, int N, int V, int ld);
// Logits columns [0, V) are vocabulary ids [vocab_begin, vocab_begin + V): 0 for the
// whole vocabulary, a shard's first row for CpuDevice::crossentropy_backward_shard.
void crossentropy_backward(ThreadPool& pool, float* dlogits, const float* logits,
                           const float* lse, const int32_t* targets, const float* mask,
                           float scale, int N, int V, int ld, int vocab_begin);

// Vocabulary-parallel pieces (cpu/vocab_shard.cpp).
void embedding_forward_shard(ThreadPool& pool, float* out, const int32_t* tokens,
                             const int32_t* positions, const float* wte, const float* wpe, int N,
                             int C, int vocab_begin, int vocab_rows);
void embedding_backward_shard(ThreadPool& pool, float* dwte, float* dwpe, const float* dout,
                              const int32_t* tokens, const int32_t* positions, int N, int C,
                              int vocab_begin, int vocab_rows);
void crossentropy_partials(ThreadPool& pool, float* partials, const float* logits,
                           const int32_t* targets, const float* mask, int N, int V, int ld,
                           int vocab_begin);
void crossentropy_combine(ThreadPool& pool, float* losses, float* lse, const float* partials,
                          int S, const float* mask, int N);

void adamw_update(ThreadPool& pool, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWArgs& args);
double sum_squares(ThreadPool& pool, Scratch& scratch, const float* x, int64_t n);
// sum_squares (its bits) and, in the same read of x, piece_sums[p] = the sum of squares
// over [piece_ends[p - 1], piece_ends[p]) (piece_ends strictly ascending, the last n;
// Device::sum_squares_split_to_host): each (block, piece) segment's sum in double, a
// piece's segments added in block order.
double sum_squares_split(ThreadPool& pool, Scratch& scratch, const float* x, int64_t n, const int64_t* piece_ends,
                         int64_t pieces, double* piece_sums);
// adamw_update with the update and weight sums of squares (Device::adamw_update_norms):
// 64 Ki-element blocks, partials in double, added in block order.
void adamw_update_norms(ThreadPool& pool, Scratch& scratch, float* param, const float* grad, float* m, float* v,
                        int64_t n, const AdamWArgs& a, double* update_sq, double* weight_sq);
// adamw_update / adamw_update_norms on every piece (Device::adamw_update_pieces) in one
// pass over the pool: the pieces' elements dealt out in order as contiguous runs of equal
// counts (at least kAdamWPiecesGrain elements a participant), except that a piece with
// sums goes in adamw_update_norms' 64 Ki-element blocks, each block whole to one
// participant, so each sum has the bits of the call per piece.
constexpr int64_t kAdamWPiecesGrain = int64_t(1) << 14;
void adamw_update_pieces(ThreadPool& pool, Scratch& scratch, float* param, const float* grad, float* m, float* v,
                         const std::vector<AdamWPiece>& pieces, const AdamWArgs& a);

}  // namespace troupe::kernels::cpu
