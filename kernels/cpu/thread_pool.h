// A small fixed thread pool with static partitioning, owned by one CpuDevice.
//
// run(f) calls f(p) once for every participant p in [0, size()): participant 0 is
// the calling thread, 1.. are the pool's workers. Work is never stolen or
// rebalanced, so which participant computes which element depends only on
// size(), never on timing. Kernels built on it are deterministic; the ones in this
// folder go further and give every output element to exactly one participant with
// an arithmetic order that does not depend on the partition at all.
//
// Not OpenMP on purpose: idle OpenMP threads spin and fight OpenBLAS and the other
// stage threads of the process; these workers spin briefly, then sleep.
// One thread at a time may call run() (a second caller meanwhile gets
// std::logic_error); the pool is not reentrant.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::kernels::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls f(p) for p in [0, size()) and returns when all have finished. The first
  // exception thrown by any participant is rethrown here.
  template <class F>
  void run(F&& f) {
    const OneCaller guard(in_run_);
    if (size_ == 1) {
      f(0);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    dispatch([](void* ctx, int p) { (*static_cast<Fn*>(ctx))(p); }, &f);
  }

  // The static partition of [0, n) into `parts` contiguous chunks: chunk p.
  static std::pair<int64_t, int64_t> chunk(int64_t n, int p, int parts) {
    return {n * p / parts, n * (p + 1) / parts};
  }

  // Calls f(begin, end) on contiguous chunks of [0, n), one per participant. Runs
  // on the caller alone when n < min_per_thread * 2 (dispatch costs microseconds).
  template <class F>
  void parallel_for(int64_t n, int64_t min_per_thread, F&& f) {
    int parts = size_;
    if (min_per_thread > 0 && n / min_per_thread < parts) parts = int(std::max<int64_t>(1, n / min_per_thread));
    if (parts == 1) {
      if (n > 0) f(int64_t(0), n);
      return;
    }
    run([&](int p) {
      if (p >= parts) return;
      auto [b, e] = chunk(n, p, parts);
      if (b < e) f(b, e);
    });
  }

 private:
  // Marks a run() in progress; a second caller meanwhile gets std::logic_error (a
  // device shared by two actors that compute at once would race on the pool's state
  // and on the device's scratch).
  struct OneCaller {
    explicit OneCaller(std::atomic<bool>& busy);
    ~OneCaller() { busy_.store(false, std::memory_order_release); }
    std::atomic<bool>& busy_;
  };
  using TaskFn = void (*)(void*, int);
  void dispatch(TaskFn fn, void* ctx);
  void worker_loop(int id);
  void stop_and_join();  // ends every worker (the destructor; a constructor that failed)

  int size_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> in_run_{false};
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace troupe::kernels::cpu
