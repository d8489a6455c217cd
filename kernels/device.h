// The kernel interface: one Device per compute context (a rank's CPU thread pool,
// or a CUDA device's streams on one GPU: kernels/cuda). It owns its memory
// (allocate) and runs every primitive the model and the optimizer need. Kernels are
// plain functions in llm.c's style: raw pointers into device buffers, explicit
// dimensions, and a comment stating the shapes. All tensors are row-major and contiguous unless a
// leading dimension (ld*) says otherwise.
//
// Conventions:
//   N   rows (tokens: B*T), C channels (width), OC output channels.
//   "+=" in a shape comment: the kernel accumulates into that output (gradients);
//   everything else is overwritten.
// Determinism: a device gives bitwise identical results for identical inputs and
// identical construction (thread count). The CPU device is stronger: every kernel
// except gemm gives the same bits for any thread count (see cpu/cpu_device.h).
// A Device is used by one thread at a time; distinct devices may run concurrently.
// One exception: a rank's stage and optimizer shard share a device and restore a
// checkpoint into it concurrently as they start (allocate, copy_from_host and
// copy_to_host only; CudaDevice guards its upload staging for that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/dropout.h"
#include "kernels/memory_ledger.h"

namespace troupe::kernels {

enum class DeviceKind { kCpu, kCuda };

// Scalars of one AdamW step over a range (see adamw_update).
struct AdamWArgs {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;      // 0 for the no-decay group
  float bias_correction1 = 1;  // 1 - beta1^t
  float bias_correction2 = 1;  // 1 - beta2^t
  float grad_scale = 1;        // clip factor applied to every gradient first
};

// One piece of adamw_update_pieces: elements [begin, end) of the pointers handed over,
// updated with its own weight decay; with update_sq and weight_sq set (host memory from
// allocate_host, read after a later when_done), also the piece's two sums, exactly as
// adamw_update_norms writes them.
struct AdamWPiece {
  int64_t begin = 0, end = 0;
  float weight_decay = 0;
  double* update_sq = nullptr;
  double* weight_sq = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  virtual std::string describe() const = 0;

  // ---- memory ----------------------------------------------------------------
  // A zero-filled, 64-byte-aligned block of `count` elements.
  virtual Buffer allocate(int64_t count, DType dtype = DType::kF32) = 0;
  // Frees memory from allocate(); called by Buffer's destructor only.
  virtual void release(void* data) = 0;
  // allocate() with the block accounted to `category` in memory() (an implementation
  // accounts each block to current_memory_category(), which this sets for the call).
  Buffer allocate_as(MemoryCategory category, int64_t count, DType dtype = DType::kF32) {
    const MemoryCategoryScope scope(category);
    return allocate(count, dtype);
  }
  // What this device's memory holds by category (kernels/memory_ledger.h): every
  // allocate() block at the bytes asked for (count x dtype size; the device's rounding
  // of a block, under 64 bytes on the CPU and 256 on CUDA, is the allocator's slack
  // and not counted), and the device's grow-once kernel scratch at its capacity. A
  // device that wraps another returns the wrapped one's.
  virtual MemoryLedger& memory() { return memory_; }
  // device -> device; on CUDA `src` may be another GPU's memory (a peer copy)
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Returns when every kernel issued so far has finished (CPU: immediately).
  virtual void synchronize() = 0;
  // Runs fn once every kernel issued so far has finished. This default (the CPU
  // device, where nothing is ever pending) synchronizes and calls fn at once on the
  // calling thread; the CUDA device calls it later on a CUDA runtime thread (fn must
  // then not call CUDA), and the caller goes on issuing work meanwhile.
  virtual void when_done(std::function<void()> fn);

  // ---- reads that do not block the caller ---------------------------------------
  // The pattern: issue the read into host memory from allocate_host, then read that
  // memory only inside a later when_done's fn (or after synchronize). On a GPU the
  // values land when the device gets there; before that the memory holds anything.
  //
  // Host memory of `bytes` (zero-filled, 64-byte aligned) that the device can copy into
  // while the caller goes on (CUDA: page-locked). Freed when the last handle goes.
  virtual std::shared_ptr<void> allocate_host(size_t bytes);
  // Copies `bytes` of device memory into `dst` (from allocate_host) after everything
  // issued so far and returns at once. Default: copy_to_host.
  virtual void copy_to_host_async(void* dst, const void* src, size_t bytes);
  // *dst (in memory from allocate_host) = sum_squares(x, n), without waiting.
  // Default: computes it at once.
  virtual void sum_squares_to_host(double* dst, const float* x, int64_t n);
  // The same total into *total and, in the same read of x, piece_sums[p] = the sum of
  // squares over [piece_ends[p - 1], piece_ends[p]) (piece_ends strictly ascending, the
  // last n; piece_sums in memory from allocate_host too): the total has sum_squares'
  // bits, a piece's sum is in double in an order fixed by n and the cuts. Default: one
  // sum_squares_to_host for the total and one for each piece (the CPU reads x once).
  virtual void sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                         const std::vector<int64_t>& piece_ends);
  // The way back: copies `bytes` from `src` (allocate_host memory) to device memory
  // after everything issued so far and returns at once; the caller must leave src
  // unchanged until a later when_done's fn runs. Default: copy_from_host.
  virtual void copy_from_host_async(void* dst, const void* src, size_t bytes);

  // ---- general matrix multiply ------------------------------------------------
  // C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, row-major, op = transpose
  // when trans_* is set (A is then stored [K, M] with leading dimension lda).
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, const float* B, int ldb, float beta, float* C, int ldc) = 0;

  // ---- layers -----------------------------------------------------------------
  // out[N, C] = wte[tokens[n], :] + wpe[positions[n], :]
  virtual void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                                 const float* wte, const float* wpe, int N, int C) = 0;
  // dwte[tokens[n], :] += dout[n, :];  dwpe[positions[n], :] += dout[n, :]
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, const int32_t* positions, int N,
                                  int C) = 0;

  // out[N, C] = (inp - mean) * rstd * weight[C] + bias[C];  mean[N], rstd[N] saved for backward.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 float eps) = 0;
  // dinp[N, C] +=, dweight[C] +=, dbias[C] += from dout[N, C].
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;

  // Conv1D / linear with the weight stored [in, out] (Hugging Face GPT-2 layout):
  //   out[N, OC] = residual[N, OC] (or 0 when null) + inp[N, C] * weight[C, OC] + bias[OC]
  //   gelu_out[N, OC] = gelu(out)   when gelu_out is not null (fused MLP activation).
  // out may alias residual.
  virtual void linear_forward(float* out, float* gelu_out, const float* inp, const float* weight,
                              const float* bias, const float* residual, int N, int C,
                              int OC) = 0;
  // dinp[N, C] = dout[N, OC] * weight^T, then, when gelu_pre[N, C] is given,
  //   dinp *= gelu'(gelu_pre) (the backward of a GELU that produced inp from gelu_pre);
  // dweight[C, OC] += inp^T * dout;  dbias[OC] += column sums of dout.
  // dinp may be null (no input gradient wanted); dweight may be null (the weight
  // gradient left for later: ZB-H1's split backward issues it as
  // gemm(true, false, C, OC, N, 1, inp, C, dout, OC, 1, dweight, OC), the same GEMM).
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* gelu_pre,
                               int N, int C, int OC) = 0;

  // Causal self-attention restricted to each token's document.
  //   qkv[B, T, 3C]: per token q | k | v, head h in columns [h*hs, (h+1)*hs) of each (hs = C/NH)
  //   doc_start[B*T]: index (within its row) of the first token of the token's document;
  //                   token t attends to s in [doc_start[t], t].
  //   out[B, T, C]: attention output, heads concatenated
  //   att[B, NH, T, T]: softmax probabilities saved for backward (row t: zero outside [doc_start, t])
  //   drop: attention dropout (kernels/dropout.h): out = dropout(att) V, head h's mask
  //         keyed by global head drop.first_col + h; att keeps the undropped values.
  //         drop.on() false: no dropout.
  virtual void attention_forward(float* out, float* att, const float* qkv,
                                 const int32_t* doc_start, int B, int T, int C, int NH,
                                 const DropoutMask& drop) = 0;
  // dqkv[B, T, 3C] = gradient of the attention w.r.t. qkv (overwritten) from dout[B, T, C];
  // drop: the forward's mask (drawn again).
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, const int32_t* doc_start, int B, int T,
                                  int C, int NH, const DropoutMask& drop) = 0;

  // Hidden dropout over token rows (kernels/dropout.h): out[rows, cols] = add + in
  // masked and scaled, where local row r is row g = first_row + r of the microbatch's
  // [B*T] tokens (sample slot drop.first_slot + g / T, position g % T) and local column
  // c is column drop.first_col + c. add may be null (nothing added); out may alias in
  // or add. drop.on() must hold.
  virtual void dropout(float* out, const float* in, const float* add, int64_t first_row, int64_t rows, int cols,
                       int T, const DropoutMask& drop);

  // Elementwise tanh-GELU over n values: out = gelu(inp); dinp = dout * gelu'(inp)
  // (dinp may alias dout).
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // out[n] = a[n] + b[n] (residual add; summing tied gradients). out may alias a or b.
  virtual void add(float* out, const float* a, const float* b, int64_t n) = 0;
  // x[n] *= s
  virtual void scale(float* x, int64_t n, float s) = 0;

  // ---- loss -------------------------------------------------------------------
  // logits[N, ld] holds V valid columns (the rest is vocab padding, never read).
  //   lse[N] = log(sum_j<V exp(logits[n, j]))
  //   losses[N] = mask[n] * (lse[n] - logits[n, targets[n]])   (0 where mask is 0)
  // Targets of masked-out rows are ignored; others must lie in [0, V).
  virtual void crossentropy_forward(float* losses, float* lse, const float* logits,
                                    const int32_t* targets, const float* mask, int N, int V,
                                    int ld) = 0;
  // dlogits[N, ld] = mask[n] * scale * (softmax(logits[n]) - onehot(targets[n])) on the V
  // valid columns, 0 on the padding columns. dlogits may alias logits.
  virtual void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                     const int32_t* targets, const float* mask, float scale,
                                     int N, int V, int ld) = 0;

  // ---- vocabulary-parallel pieces (tensor parallelism) --------------------------
  // A tensor-parallel rank holds rows [vocab_begin, vocab_begin + vocab_rows) of the
  // token embedding (and so those columns of the tied head's logits). The loss is
  // separable: per row, the shard's max, its sum of exp(logit - max) and the target's
  // logit are all the group needs to exchange (3 floats per token), never the logits.
  // The defaults throw std::logic_error: a device that cannot run tensor parallelism.
  //
  // out[N, C] = (tokens[n] in the range ? wte[tokens[n] - vocab_begin] : 0)
  //             + (wpe ? wpe[positions[n]] : 0)
  // (one rank adds wpe; the group's sum is then the whole embedding, bitwise).
  virtual void embedding_forward_shard(float* out, const int32_t* tokens, const int32_t* positions,
                                       const float* wte, const float* wpe, int N, int C,
                                       int vocab_begin, int vocab_rows);
  // dwte[tokens[n] - vocab_begin] += dout[n] for tokens in the range (rows added in
  // token order); dwpe[positions[n]] += dout[n] when dwpe is not null.
  virtual void embedding_backward_shard(float* dwte, float* dwpe, const float* dout,
                                        const int32_t* tokens, const int32_t* positions, int N,
                                        int C, int vocab_begin, int vocab_rows);
  // logits[N, ld] hold the shard's V valid columns, vocabulary ids [vocab_begin,
  // vocab_begin + V). partials[3, N]: [0] max over the V columns (-inf when V = 0),
  // [1] sum_j exp(logit_j - max), [2] the target's logit when the target lies in the
  // shard, else 0. Masked-out rows get (0, 0, 0).
  virtual void crossentropy_partials(float* partials, const float* logits, const int32_t* targets,
                                     const float* mask, int N, int V, int ld, int vocab_begin);
  // partials[S, 3, N] of S shards in shard order -> lse[N] = M + log(sum_s sum_s *
  // exp(max_s - M)) with M = max_s max_s, losses[N] = mask * (lse - sum_s target_s);
  // masked-out rows get 0 and 0. One shard reproduces crossentropy_forward.
  virtual void crossentropy_combine(float* losses, float* lse, const float* partials, int S,
                                    const float* mask, int N);
  // crossentropy_backward on a shard: dlogits[N, ld] = mask * scale * (exp(logit - lse)
  // - [vocab_begin + j == target]) on the V valid columns, 0 on columns V..ld-1.
  virtual void crossentropy_backward_shard(float* dlogits, const float* logits, const float* lse,
                                           const int32_t* targets, const float* mask, float scale,
                                           int N, int V, int ld, int vocab_begin);

  // ---- optional layers (model families beyond GPT-2) ------------------------------
  // The defaults throw std::logic_error naming the primitive: a device without them
  // runs GPT-2 only.
  // RMSNorm: out[N, C] = inp * rstd * weight[C], rstd[N] = 1 / sqrt(mean(inp^2) + eps) saved.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                               float eps);
  // dinp[N, C] +=, dweight[C] += from dout[N, C].
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int N, int C);

  // Rotary position embedding (Llama; Hugging Face's rotate-half pairing), in place on
  // `heads` heads of head size hs per row of x (row stride ld floats; head j at columns
  // [j hs, (j+1) hs)). With p = positions[n] (restarting at each document) and
  // i < hs/2, the pair (a, b) = (x[i], x[i + hs/2]) of every head becomes
  //   a' = a cos[p, i] - b sin[p, i];   b' = b cos[p, i] + a sin[p, i]
  // cos and sin are [max_positions, hs/2] tables (model/layers/rope.h computes them).
  virtual void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int N, int heads,
                            int hs, int64_t ld);
  // The backward: dx (same layout) rotated by -angle in place (the transpose of forward).
  virtual void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin, int N,
                             int heads, int hs, int64_t ld);

  // SwiGLU's activation over n values: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
  virtual void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
  // dgate = dout * up * silu'(gate);  dup = dout * silu(gate)  (both overwritten; dgate
  // may alias gate and dup may alias up).
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                               int64_t n);

  // Grouped-query attention, causal within each token's document: NH query heads share
  // KV key/value heads (NH % KV == 0; query head h reads kv head h / (NH / KV); KV == NH
  // is multi-head, KV == 1 multi-query). k and v are never copied per query head.
  //   qkv[B, T, (NH + 2 KV) hs]: per token q (NH heads) | k (KV heads) | v (KV heads)
  //   doc_start[B*T] as in attention_forward
  //   out[B, T, NH hs]: heads concatenated
  //   att[B, NH, T, T]: softmax probabilities saved for backward (zero outside the mask)
  //   drop: attention dropout as in attention_forward (first_col: the global index of query head 0)
  virtual void gqa_attention_forward(float* out, float* att, const float* qkv, const int32_t* doc_start, int B, int T,
                                     int NH, int KV, int hs, const DropoutMask& drop);
  // dqkv[B, T, (NH + 2 KV) hs] (overwritten) from dout[B, T, NH hs]; a kv head's dk and
  // dv sum its query heads' contributions in head order.
  virtual void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                      const int32_t* doc_start, int B, int T, int NH, int KV, int hs,
                                      const DropoutMask& drop);

  // ---- optimizer --------------------------------------------------------------
  // One decoupled AdamW step on n elements (docs/numerics.md, "AdamW"):
  //   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
  //   param = param * (1 - lr*wd) - lr * (m / bc1) / (sqrt(v / bc2) + eps)
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                            const AdamWArgs& args) = 0;
  // adamw_update, fused with the sums behind the update-to-weight norm ratio: into
  // *update_sq the sum over the n elements of (param after - param before)^2 and into
  // *weight_sq of (param before)^2, each in double (the difference of two floats taken
  // in double), in an order fixed by n alone, written like sum_squares_to_host (memory
  // from allocate_host, read after a later when_done). param, m and v get bitwise what
  // adamw_update gives them: the sums only read the values it computes.
  virtual void adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                                  const AdamWArgs& args, double* update_sq, double* weight_sq) = 0;
  // adamw_update (adamw_update_norms for a piece with sums) on every piece, with the
  // piece's weight decay in place of args.weight_decay: bitwise what those calls give one
  // after another, in any order (the pieces are disjoint). The default makes exactly those
  // calls; the CPU device runs all pieces in one pass over its threads, so that a model of
  // many small tensors is not updated one tensor at a time on one thread.
  virtual void adamw_update_pieces(float* param, const float* grad, float* m, float* v,
                                   const std::vector<AdamWPiece>& pieces, const AdamWArgs& args);
  // sum of x[i]^2 in double, in an order fixed by n alone.
  virtual double sum_squares(const float* x, int64_t n) = 0;

 private:
  MemoryLedger memory_;
};

// A host copy of the n floats at `p` in `device`'s memory (waits for the device).
inline std::vector<float> download(Device& device, const float* p, size_t n) {
  std::vector<float> out(n);
  device.copy_to_host(out.data(), p, n * sizeof(float));
  return out;
}

}  // namespace troupe::kernels
