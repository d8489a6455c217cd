// Tensor parallelism inside one model object, Megatron-LM style (docs/compute.md,
// "Tensor and sequence parallelism"). A GptStage of tensor-parallel rank t of T holds
// the slices ParameterRegistry(c, range, {t, T}) lists and runs these collectives on
// its group, always in the order of its own ops, so every rank of a group issues the
// same collectives in the same order.
//
// Without sequence parallelism the residual stream [N, D] (N = B*T tokens) is
// replicated: an all-reduce completes each row-parallel layer (forward) and each
// column-parallel layer's input gradient (backward). With sequence parallelism rank
// t holds only the token rows [t*N/T, (t+1)*N/T) of the residual stream and of the
// LayerNorms: the rows are all-gathered before each column-parallel layer and
// reduce-scattered after each row-parallel one (and the reverse in backward).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"

namespace troupe::model {

struct TensorParallel {
  // The group of the stage's tensor-parallel ranks; null (or size 1): none.
  std::shared_ptr<comm::Communicator> group;
  bool sequence_parallel = false;  // only meaningful with a group of size > 1

  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  bool active() const { return size() > 1; }
  bool sequence() const { return sequence_parallel && active(); }
};

// The group's collectives over row-major [N, W] fp32 activations in device memory,
// with the time spent in them (the communication share of a step). They use the
// communicator's issue forms: blocking in-process or Gloo collectives, or NCCL ones
// enqueued in order with the GPU's work (the time is then the enqueueing only).
class TpCollectives {
 public:
  explicit TpCollectives(TensorParallel tp) : tp_(std::move(tp)) {}

  const TensorParallel& config() const { return tp_; }

  // x[N, W] <- the sum over ranks (rank order; every rank gets the same bits).
  void all_reduce(float* x, int64_t N, int64_t W);
  // full[N, W]: each rank's row block [r*N/T, (r+1)*N/T), already in place in its
  // own `full`, is copied to every rank. N must divide by T.
  void gather_rows(float* full, int64_t N, int64_t W);
  // out[N/T, W] <- rows [t*N/T, (t+1)*N/T) of the sum over ranks of in[N, W]; out may
  // be this rank's own rows of `in`.
  void reduce_scatter_rows(const float* in, float* out, int64_t N, int64_t W);
  // Any span of n floats: the sum over ranks (the replicated LayerNorm gradients).
  void all_reduce_flat(float* x, int64_t n);

  // Seconds spent inside collectives since construction or the last reset.
  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

 private:
  TensorParallel tp_;
  double seconds_ = 0;
};

}  // namespace troupe::model
