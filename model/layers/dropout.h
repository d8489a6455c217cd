// Dropout at the sites Megatron-LM puts it (docs/compute.md, "Dropout"): the
// embedding's output and each block's two output projections before the residual add
// (hidden_dropout), and the attention probabilities (attention_dropout, inside the
// attention kernels). Masks are counter-based (kernels/dropout.h): a site's key comes
// from the run's seed, the global layer index and the site, and an element's draw
// from its sample slot, position and global column, so every layout, a restart and a
// recomputation draw the same mask.
//
// Dropout applies to training microbatches only: a Sequence with first_slot < 0
// (evaluation) runs every site as the identity, exactly as p = 0 does.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"
#include "model/layers/layer.h"
#include "model/layers/tp_context.h"

namespace troupe::model::layers {

// One site: its probability and its key (kernels::dropout_key).
struct DropoutConfig {
  float p = 0;
  uint64_t key = 0;
};

// The mask of site c for the microbatch `seq` (off for p = 0 or evaluation);
// first_col: the global column (hidden sites: 0) or head (attention) of local index 0.
kernels::DropoutMask dropout_mask(const DropoutConfig& c, const Sequence& seq, int first_col);

// Megatron's bias-dropout-add at a row-parallel output projection:
//   out[Nr, D] = residual[Nr, D] + dropout(out)      (out holds y = x W + b on entry)
// Nr = this rank's residual rows of the seq's N tokens. Only when dropout_mask(c, seq,
// 0).on(); otherwise the projection adds the residual itself.
void dropout_add_residual(TpContext& tp, const kernels::DropoutMask& m, const Sequence& seq, float* out,
                          const float* residual, int D);

// The gradient reaching y: this rank's rows of `masked` [N, D] = dropout(dout rows)
// (dout [N, D] with this rank's rows filled). Returns masked, or dout itself when the
// mask is off.
float* dropout_backward_rows(TpContext& tp, const kernels::DropoutMask& m, const Sequence& seq, float* dout,
                             float* masked, int D);

}  // namespace troupe::model::layers
