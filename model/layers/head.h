// The output head: logits over this rank's vocabulary shard. Tied (GPT-2: the
// weight is the token embedding's wte, which the stage passes) or untied (a tensor
// of its own with the same [vocab rows, D] layout); the layer does not care which.
//
// Vocabulary-parallel at TP > 1: rank t computes its real columns only (a rank may
// hold only padding), the loss (loss.h) combines the shards, and the input gradient
// is a partial sum completed over the group like any column-parallel layer's.
#pragma once

#include "model/layers/layer.h"
#include "model/layers/tp_context.h"
#include "model/layers/weight_grad_queue.h"

namespace troupe::model::layers {

struct HeadConfig {
  int width = 0;  // D
  VocabShard vocab;
};

class Head {
 public:
  Head(const HeadConfig& c, Weight w, TpContext& tp);
  // Row stride of the logits: the shard's rows (padded vocabulary at TP = 1).
  int ld() const { return c_.vocab.rows; }
  // logits[N, ld] columns [0, valid) = x[N, D] w[0:valid]^T (the rest untouched);
  // x: [N, D] with this rank's rows filled (completed in place under SP).
  void forward(float* logits, float* x, int N);
  // dx[N, D] = dlogits[:, 0:valid] w[0:valid] (overwritten);  dw[0:valid] += dlogits^T x.
  // Returns this rank's rows [Nr, D] of the group's completed dx.
  // defer: the weight GEMM queued there (dlogits and x are the slot's) instead of issued.
  float* backward(float* dx, const float* dlogits, const float* x, int N, WeightGradQueue* defer = nullptr);

 private:
  HeadConfig c_;
  Weight w_;
  TpContext& tp_;
};

}  // namespace troupe::model::layers
