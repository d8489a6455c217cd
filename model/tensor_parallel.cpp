#include "model/tensor_parallel.h"

#include <chrono>
#include <span>
#include <stdexcept>
#include <string>

namespace troupe::model {
namespace {

class Timed {
 public:
  explicit Timed(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~Timed() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

void check_rows(int64_t N, int T) {
  if (N % T != 0)
    throw std::invalid_argument("sequence parallelism: " + std::to_string(N) +
                                " tokens do not split evenly over " + std::to_string(T) + " tensor-parallel ranks");
}

}  // namespace

void TpCollectives::all_reduce(float* x, int64_t N, int64_t W) { all_reduce_flat(x, N * W); }

void TpCollectives::all_reduce_flat(float* x, int64_t n) {
  if (!tp_.active()) return;
  Timed t(seconds_);
  tp_.group->issue_all_reduce_sum(std::span<float>(x, size_t(n)));
}

void TpCollectives::gather_rows(float* full, int64_t N, int64_t W) {
  if (!tp_.active()) return;
  check_rows(N, tp_.size());
  Timed t(seconds_);
  const int64_t rows = N / tp_.size();
  std::span<float> all(full, size_t(N * W));
  tp_.group->issue_all_gather(all.subspan(size_t(tp_.rank() * rows * W), size_t(rows * W)), all);
}

void TpCollectives::reduce_scatter_rows(const float* in, float* out, int64_t N, int64_t W) {
  if (!tp_.active()) return;
  check_rows(N, tp_.size());
  Timed t(seconds_);
  const int64_t rows = N / tp_.size();
  tp_.group->issue_reduce_scatter_sum(std::span<const float>(in, size_t(N * W)),
                                      std::span<float>(out, size_t(rows * W)));
}

}  // namespace troupe::model
