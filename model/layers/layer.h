// What every layer of model/layers shares: a parameter as (value, gradient) pointers
// into the stage's two flat buffers, the capacity an activation slot is laid out for,
// and the backward scratch all slots share.
//
// A layer is a small object built from its own config struct (never the whole
// Config) and its weights. It has a forward and a backward over kernels::Device, each
// with its shapes in the comment, and it saves what its backward needs in a region of
// the caller's activation slot: saved_floats() floats at the address the caller
// passes, laid out by the layer for the slot's capacity. Kernels see the actual
// microbatch (B x T <= capacity) in the prefix of each saved array.
//
// Shapes: N = B*T tokens of the microbatch; D model width; Nr = the residual-stream
// rows held by this tensor-parallel rank (N, or N / TP under sequence parallelism;
// tp_context.h). "[N, D] (rows of this rank filled)" is a full-height buffer of which
// only rows [first_row, first_row + Nr) hold values until a gather fills the rest.
#pragma once

#include <cstdint>

namespace troupe::model::layers {

// One parameter tensor: its values and its gradient (same layout, same offset in
// the stage's params and grads buffers). value == nullptr: the layer has no such
// tensor (a bias-free linear, an RMSNorm's missing shift).
struct Weight {
  float* value = nullptr;
  float* grad = nullptr;
  explicit operator bool() const { return value != nullptr; }
};

// Where the tokens of a microbatch sit (device memory, [B*T] each): doc_start, the
// index within its row of the first token of the token's document (attention is
// causal within it); positions, the token's position in its document (0 at each
// document start and at each sample start; learned or rotary positions read it).
// first_slot: the sample slot of row 0 in the run's order (data::Microbatch::
// first_slot), which keys the dropout masks (layers/dropout.h); -1: no dropout
// (evaluation).
struct Sequence {
  const int32_t* doc_start = nullptr;
  const int32_t* positions = nullptr;
  int B = 0;  // rows
  int T = 0;  // positions per row
  int64_t first_slot = -1;
  int tokens() const { return B * T; }
};

// The largest microbatch an activation slot holds.
struct Capacity {
  int batch = 0;  // rows B
  int seq = 0;    // positions T
  int64_t tokens() const { return int64_t(batch) * seq; }
};

// Backward (and a few forward) scratch shared by every slot and layer of a stage,
// valid for one call: small [N, D], big [N, scratch width] (the widest layer's need),
// masked [N, D] (the hidden-dropout backward's masked gradient; null when the model
// has no hidden dropout), recompute (what selectively recomputing layers hold instead
// of their slot: the largest recompute_floats() of the stage's layers; null without
// selective recomputation), defer (the split backward's input pass: where the linear
// layers queue their weight-gradient GEMMs instead of issuing them,
// weight_grad_queue.h; null: the whole backward at once).
class WeightGradQueue;
struct Workspace {
  float* small = nullptr;
  float* big = nullptr;
  float* masked = nullptr;
  float* recompute = nullptr;
  WeightGradQueue* defer = nullptr;
};

// The rows of the token embedding (and so the logit columns of a head tied or not)
// this rank holds: vocabulary ids [begin, begin + rows), of which the first `valid`
// are real tokens (the rest is padding, never predicted). TP = 1: begin 0, rows the
// padded vocabulary, valid vocab_size.
struct VocabShard {
  int begin = 0;
  int rows = 0;
  int valid = 0;
};

// A cursor over an activation slot's region: each take(n) hands out the next n floats.
class Carver {
 public:
  explicit Carver(float* p) : p_(p) {}
  float* take(int64_t n) {
    float* r = p_;
    p_ += n;
    return r;
  }

 private:
  float* p_;
};

}  // namespace troupe::model::layers
