// A tensor-parallel rank's view of its group, as the layers use it (docs/compute.md,
// "Tensor and sequence parallelism"). At TP = 1 every operation here is the identity
// (no collective, no copy), so a layer written against it runs unchanged on one rank.
//
// Where the rows of the residual stream [N, D] live:
//   - TP = 1, or TP > 1 without sequence parallelism: every rank holds all N rows;
//   - sequence parallelism: rank t holds rows [t*N/TP, (t+1)*N/TP) (rows(N) of them,
//     from first_row(N)); column-parallel layers all-gather their input rows first
//     and row-parallel layers reduce-scatter their output.
// Every rank of a group must issue the same calls in the same order (the collectives
// pair up by order); each collective adds in rank order, so all ranks get the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/device.h"
#include "model/tensor_parallel.h"

namespace troupe::model::layers {

class TpContext {
 public:
  // capacity_tokens: the most tokens a microbatch has (sizes the ones vector that
  // the column-parallel QKV pieces use for their bias, allocated at TP > 1 only).
  TpContext(kernels::Device& device, TensorParallel tp, int64_t capacity_tokens);

  kernels::Device& device() const { return device_; }
  TpCollectives& collectives() { return coll_; }
  const TpCollectives& collectives() const { return coll_; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence() const { return sequence_; }
  // The rank that adds replicated terms (biases, residuals, positions) exactly once.
  bool owner() const { return rank_ == 0; }

  // Residual-stream rows held here for n tokens, and the first of them.
  int64_t rows(int64_t n) const { return sequence_ ? n / size_ : n; }
  int64_t first_row(int64_t n) const { return sequence_ ? int64_t(rank_) * (n / size_) : 0; }
  // Whether n tokens split into this group's row shards (always, without SP).
  bool splits(int64_t n) const { return !sequence_ || n % size_ == 0; }

  // full[n, w] with this rank's rows filled -> every rank's rows (SP); else nothing.
  void gather_sequence(float* full, int64_t n, int64_t w);
  // partial[n, w], one rank's share of a sum -> out[rows(n), w], the group's sum of
  // this rank's rows. Without SP out must be partial (all-reduce in place); under SP
  // out may be this rank's rows of partial (reduce-scatter). TP = 1: nothing.
  void reduce_to_rows(float* partial, float* out, int64_t n, int64_t w);
  // The input gradient dx[n, w] of a column-parallel layer holds this rank's partial
  // sum: completed over the group in place (no SP) or into this rank's rows (SP).
  // Returns where this rank's rows[n] of the completed gradient are (dx at TP = 1).
  float* complete_input_grad(float* dx, int64_t n, int64_t w);

  // n ones (n <= capacity_tokens; TP > 1 only).
  const float* ones() const { return ones_.f32(); }

  // Gradients of replicated parameters that each rank computed from its own share
  // only (the norms under SP, from their rows; a grouped-query attention's replicated
  // k and v, from its query heads): allocate_grad_staging(total floats) once, then
  // sum_row_sharded_grads sums every span over the group in one collective. At TP = 1
  // both do nothing; so does the sum of no spans.
  struct Span {
    float* grad;
    int64_t n;
  };
  void allocate_grad_staging(int64_t floats);
  void sum_row_sharded_grads(const std::vector<Span>& spans);

  // Floats of the two buffers above (0 at TP = 1).
  int64_t buffer_floats() const { return ones_.count() + staging_.count(); }

 private:
  kernels::Device& device_;
  TpCollectives coll_;
  int size_, rank_;
  bool sequence_;
  kernels::Buffer ones_, staging_;
};

}  // namespace troupe::model::layers
