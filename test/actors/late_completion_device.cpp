#include "test/actors/late_completion_device.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace troupe::testing {

LateCompletionDevice::LateCompletionDevice(std::chrono::microseconds lag)
    : lag_(lag), queue_(std::make_shared<Queue>()), thread_(run, queue_) {}

LateCompletionDevice::~LateCompletionDevice() {
  {
    std::lock_guard lock(queue_->mu);
    queue_->stop = true;
  }
  queue_->cv.notify_all();
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // destroyed by one of its own fns: the thread ends after it
  else
    thread_.join();
}

void LateCompletionDevice::run(std::shared_ptr<Queue> q) {
  std::unique_lock lock(q->mu);
  for (;;) {
    q->cv.wait(lock, [&] { return q->stop || !q->items.empty(); });
    if (q->items.empty()) return;  // stopped, nothing left
    if (!q->stop && Clock::now() < q->items.front().due) {
      q->cv.wait_until(lock, q->items.front().due);
      continue;
    }
    auto fn = std::move(q->items.front().fn);
    q->items.pop_front();
    q->running = true;
    lock.unlock();
    fn();
    fn = nullptr;  // its captures go here, outside the lock
    lock.lock();
    q->running = false;
    q->cv.notify_all();
  }
}

void LateCompletionDevice::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lock(queue_->mu);
    queue_->items.push_back({Clock::now() + lag_, std::move(fn)});
  }
  queue_->cv.notify_all();
}

void LateCompletionDevice::drain() {
  std::unique_lock lock(queue_->mu);
  queue_->cv.wait(lock, [&] { return queue_->items.empty() && !queue_->running; });
}

LateCompletionDevice::Waits LateCompletionDevice::waits() const {
  std::lock_guard lock(waits_mu_);
  return waits_;
}

void LateCompletionDevice::wait(int64_t Waits::*counter) {
  drain();
  std::lock_guard lock(waits_mu_);
  ++(waits_.*counter);
}

void LateCompletionDevice::synchronize() { wait(&Waits::synchronize); }

void LateCompletionDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  wait(&Waits::copy_to_host);
  inner_.copy_to_host(dst, src, bytes);
}

double LateCompletionDevice::sum_squares(const float* x, int64_t n) {
  wait(&Waits::sum_squares);
  return inner_.sum_squares(x, n);
}

// The kernels before this call have run, so `src` holds what a GPU would copy when it
// got here; the copy into host memory lands with the queue.
void LateCompletionDevice::copy_to_host_async(void* dst, const void* src, size_t bytes) {
  std::vector<char> bytes_now(bytes);
  inner_.copy_to_host(bytes_now.data(), src, bytes);
  enqueue([dst, v = std::move(bytes_now)] { std::memcpy(dst, v.data(), v.size()); });
}

void LateCompletionDevice::sum_squares_to_host(double* dst, const float* x, int64_t n) {
  const double sum = inner_.sum_squares(x, n);
  enqueue([dst, sum] { *dst = sum; });
}

void LateCompletionDevice::sum_squares_split_to_host(double* total, double* piece_sums, const float* x, int64_t n,
                                                     const std::vector<int64_t>& piece_ends) {
  auto sums = std::make_shared<std::vector<double>>(piece_ends.size() + 1);
  inner_.sum_squares_split_to_host(sums->data(), sums->data() + 1, x, n, piece_ends);
  enqueue([total, piece_sums, sums] {
    *total = (*sums)[0];
    std::copy(sums->begin() + 1, sums->end(), piece_sums);
  });
}

void LateCompletionDevice::adamw_update_norms(float* param, const float* grad, float* m, float* v, int64_t n,
                                              const kernels::AdamWArgs& args, double* update_sq, double* weight_sq) {
  double u = 0, w = 0;
  inner_.adamw_update_norms(param, grad, m, v, n, args, &u, &w);
  enqueue([update_sq, weight_sq, u, w] {
    *update_sq = u;
    *weight_sq = w;
  });
}

}  // namespace troupe::testing
