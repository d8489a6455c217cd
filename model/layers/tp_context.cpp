#include "model/layers/tp_context.h"

#include <utility>

namespace troupe::model::layers {

TpContext::TpContext(kernels::Device& device, TensorParallel tp, int64_t capacity_tokens)
    : device_(device),
      coll_(std::move(tp)),
      size_(coll_.config().size()),
      rank_(coll_.config().rank()),
      sequence_(coll_.config().sequence()) {
  if (size_ > 1) {
    ones_ = device_.allocate(capacity_tokens, kernels::DType::kF32);
    const std::vector<float> ones(size_t(capacity_tokens), 1.0f);
    device_.copy_from_host(ones_.f32(), ones.data(), ones.size() * sizeof(float));
  }
}

void TpContext::gather_sequence(float* full, int64_t n, int64_t w) {
  if (sequence_) coll_.gather_rows(full, n, w);
}

void TpContext::reduce_to_rows(float* partial, float* out, int64_t n, int64_t w) {
  if (size_ == 1) return;
  if (sequence_)
    coll_.reduce_scatter_rows(partial, out, n, w);
  else
    coll_.all_reduce(partial, n, w);
}

float* TpContext::complete_input_grad(float* dx, int64_t n, int64_t w) {
  if (size_ == 1) return dx;
  if (!sequence_) {
    coll_.all_reduce(dx, n, w);
    return dx;
  }
  float* mine = dx + first_row(n) * w;
  coll_.reduce_scatter_rows(dx, mine, n, w);
  return mine;
}

void TpContext::allocate_grad_staging(int64_t floats) {
  if (size_ > 1) staging_ = device_.allocate(floats, kernels::DType::kF32);
}

void TpContext::sum_row_sharded_grads(const std::vector<Span>& spans) {
  if (size_ == 1 || spans.empty()) return;
  // Gathered into one staging vector, summed in one collective, and put back.
  float* stage = staging_.f32();
  int64_t at = 0;
  for (const Span& s : spans) {
    device_.copy(stage + at, s.grad, size_t(s.n) * sizeof(float));
    at += s.n;
  }
  coll_.all_reduce_flat(stage, at);
  at = 0;
  for (const Span& s : spans) {
    device_.copy(s.grad, stage + at, size_t(s.n) * sizeof(float));
    at += s.n;
  }
}

}  // namespace troupe::model::layers
