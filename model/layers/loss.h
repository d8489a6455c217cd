// Cross-entropy over the real vocabulary (padding columns never predicted), per
// token with the loss mask (the loss contract: docs/compute.md).
//
// Vocabulary-parallel at TP > 1: each rank's shard of the logits gives three floats
// per token (max, sum of exps, target logit: Device::crossentropy_partials), the
// group all-gathers them ([TP, 3, N], never the logits), and every rank combines them
// identically; the backward needs the rank's columns and the combined lse only.
#pragma once

#include <cstdint>

#include "model/layers/layer.h"
#include "model/layers/tp_context.h"

namespace troupe::model::layers {

struct LossConfig {
  VocabShard vocab;
};

class Loss {
 public:
  Loss(const LossConfig& c, TpContext& tp);
  // Floats per token of the Workspace::big the forward gathers the partials into.
  int64_t scratch_width() const { return 3 * int64_t(tp_.size()); }
  // losses[N] = mask * (lse - logit[target]), lse[N] = log sum_j<V exp(logit_j), from
  // this rank's logits[N, ld] (ld = vocab.rows); every rank gets the whole losses.
  void forward(float* losses, float* lse, const float* logits, const int32_t* targets, const float* mask, int N,
               const Workspace& ws);
  // dlogits[N, ld] = mask * scale * (softmax - onehot) on the shard's real columns,
  // 0 on its padding (dlogits may alias logits).
  void backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, const float* mask,
                float scale, int N);

 private:
  LossConfig c_;
  TpContext& tp_;
};

}  // namespace troupe::model::layers
