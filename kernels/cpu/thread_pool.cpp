#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <stdexcept>
#include <string>
#include <system_error>

namespace troupe::kernels::cpu {
namespace {
// Spin iterations before a worker or the caller sleeps on its condition variable:
// long enough to catch the next kernel of a step. A pause costs very different times
// on different x86 cores, so the spin is a count, not a time: a spin by the clock made
// the actor runtime's tiny steps slower on the development machine, likely because a
// spinning pool keeps its vCPU awake, and a thread woken onto an awake vCPU starts
// sooner than on a halted one. What 4000 pauses take, and the comparison:
// docs/performance.md, "Numbers the code's comments rely on".
constexpr int kSpin = 4000;
}  // namespace

ThreadPool::OneCaller::OneCaller(std::atomic<bool>& busy) : busy_(busy) {
  if (busy_.exchange(true, std::memory_order_acquire))
    throw std::logic_error("ThreadPool: run() called from two threads at once (is a device shared by two actors "
                           "that compute at the same time?)");
}

ThreadPool::ThreadPool(int threads) : size_(threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool: threads must be >= 1");
  try {
    workers_.reserve(size_t(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (const std::system_error& e) {
    // No thread to be had (a thread or memory limit): the workers started so far are
    // stopped and joined (a joinable std::thread destroyed would abort the process), and
    // the caller gets one error that says what could not be had.
    const size_t failed = workers_.size() + 2;  // the caller is participant 1
    stop_and_join();
    throw std::runtime_error("cannot start compute thread " + std::to_string(failed) + " of " +
                             std::to_string(threads) + ": " + e.what());
  }
}

void ThreadPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::dispatch(TaskFn fn, void* ctx) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    error_ = nullptr;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    fn(ctx, 0);
  } catch (...) {
    mine = std::current_exception();
  }
  for (int i = 0; i < kSpin && pending_.load(std::memory_order_acquire) != 0; ++i) _mm_pause();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  std::exception_ptr theirs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    theirs = error_;
    fn_ = nullptr;
    ctx_ = nullptr;
  }
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) _mm_pause();
    TaskFn fn;
    void* ctx;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      fn = fn_;
      ctx = ctx_;
    }
    try {
      fn(ctx, id);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace troupe::kernels::cpu
