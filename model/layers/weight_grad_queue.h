// ZB-H1's split backward (docs/compute.md, "Split backward"): the weight-gradient work
// an input-gradient pass leaves for the weight pass of the same microbatch.
//
// backward_input runs a slot's backward with a queue in its Workspace: each linear
// layer then computes its input gradient as before but, instead of its weight-gradient
// GEMM dW += x^T dout, keeps dout (a copy in the slot's region; x is already in the
// slot) and queues the GEMM; the embedding queues its scatter-add the same way. The
// norms' scale and shift and the linears' biases are cheap column sums and stay in
// the input pass. backward_weight runs the queue in the order it was filled, which is
// the order the whole backward issues the same kernels in, on the same inputs: every
// gradient gets the same bits either way.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/device.h"

namespace troupe::model::layers {

class WeightGradQueue {
 public:
  // region: `floats` floats of device memory (the slot's) where kept gradients go.
  void reset(float* region, int64_t floats);
  // Copies n floats from src into the region and returns where they now are.
  // Throws std::logic_error when the region is full (a layer's deferred_floats() is wrong).
  float* keep(kernels::Device& dev, const float* src, int64_t n);
  // C[M, N] += op(A) op(B) (Device::gemm with alpha 1, beta 1), issued by run().
  void gemm(kernels::Device& dev, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
            const float* B, int ldb, float* C, int ldc);
  // Any other deferred weight-gradient work (the embedding's scatter-add).
  void push(std::function<void()> op) { ops_.push_back(std::move(op)); }
  // Issues every queued op in order and empties the queue.
  void run();
  // Issues the queued ops [issued, upto) (upto <= size()); run() then issues the rest.
  void run_until(size_t upto);
  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  int64_t used_floats() const { return used_; }

 private:
  float* region_ = nullptr;
  int64_t floats_ = 0, used_ = 0;
  std::vector<std::function<void()>> ops_;
  size_t issued_ = 0;  // ops run_until has issued
};

}  // namespace troupe::model::layers
