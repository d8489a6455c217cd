#include "model/layers/dropout.h"

namespace troupe::model::layers {

kernels::DropoutMask dropout_mask(const DropoutConfig& c, const Sequence& seq, int first_col) {
  if (seq.first_slot < 0) return {};
  return kernels::make_dropout_mask(c.p, c.key, seq.first_slot, first_col);
}

void dropout_add_residual(TpContext& tp, const kernels::DropoutMask& m, const Sequence& seq, float* out,
                          const float* residual, int D) {
  const int64_t N = seq.tokens();
  tp.device().dropout(out, out, residual, tp.first_row(N), tp.rows(N), D, seq.T, m);
}

float* dropout_backward_rows(TpContext& tp, const kernels::DropoutMask& m, const Sequence& seq, float* dout,
                             float* masked, int D) {
  if (!m.on()) return dout;
  const int64_t N = seq.tokens(), first = tp.first_row(N);
  tp.device().dropout(masked + first * D, dout + first * D, nullptr, first, tp.rows(N), D, seq.T, m);
  return masked;
}

}  // namespace troupe::model::layers
