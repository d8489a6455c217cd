#include "model/layers/loss.h"

namespace troupe::model::layers {

Loss::Loss(const LossConfig& c, TpContext& tp) : c_(c), tp_(tp) {}

void Loss::forward(float* losses, float* lse, const float* logits, const int32_t* targets, const float* mask, int N,
                   const Workspace& ws) {
  kernels::Device& dev = tp_.device();
  const VocabShard& v = c_.vocab;
  if (tp_.size() == 1) {
    dev.crossentropy_forward(losses, lse, logits, targets, mask, N, v.valid, v.rows);
    return;
  }
  float* gathered = ws.big;  // [TP, 3, N]
  float* mine = gathered + int64_t(tp_.rank()) * 3 * N;
  dev.crossentropy_partials(mine, logits, targets, mask, N, v.valid, v.rows, v.begin);
  tp_.collectives().gather_rows(gathered, tp_.size(), 3 * int64_t(N));
  dev.crossentropy_combine(losses, lse, gathered, tp_.size(), mask, N);
}

void Loss::backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets, const float* mask,
                    float scale, int N) {
  kernels::Device& dev = tp_.device();
  const VocabShard& v = c_.vocab;
  if (tp_.size() == 1)
    dev.crossentropy_backward(dlogits, logits, lse, targets, mask, scale, N, v.valid, v.rows);
  else
    dev.crossentropy_backward_shard(dlogits, logits, lse, targets, mask, scale, N, v.valid, v.rows, v.begin);
}

}  // namespace troupe::model::layers
