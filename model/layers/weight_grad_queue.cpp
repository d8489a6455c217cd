#include "model/layers/weight_grad_queue.h"

#include <stdexcept>
#include <string>

namespace troupe::model::layers {

void WeightGradQueue::reset(float* region, int64_t floats) {
  region_ = region;
  floats_ = floats;
  used_ = 0;
  ops_.clear();
  issued_ = 0;
}

float* WeightGradQueue::keep(kernels::Device& dev, const float* src, int64_t n) {
  if (used_ + n > floats_)
    throw std::logic_error("WeightGradQueue: " + std::to_string(used_ + n) + " floats kept for the weight pass, " +
                           std::to_string(floats_) + " reserved in the slot");
  float* at = region_ + used_;
  used_ += n;
  dev.copy(at, src, size_t(n) * sizeof(float));
  return at;
}

void WeightGradQueue::gemm(kernels::Device& dev, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
                           int lda, const float* B, int ldb, float* C, int ldc) {
  ops_.push_back([&dev, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc] {
    dev.gemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
  });
}

void WeightGradQueue::run_until(size_t upto) {
  if (upto > ops_.size())
    throw std::logic_error("WeightGradQueue: run until op " + std::to_string(upto) + " of " +
                           std::to_string(ops_.size()));
  for (; issued_ < upto; ++issued_) ops_[issued_]();
}

void WeightGradQueue::run() {
  run_until(ops_.size());
  ops_.clear();
  issued_ = 0;
  used_ = 0;
}

}  // namespace troupe::model::layers
