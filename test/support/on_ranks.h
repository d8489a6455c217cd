// Runs fn(rank) for each of T ranks on its own thread (collectives need them all at
// once); rethrows the first exception after every thread has ended.
#pragma once

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::testing {

template <class F>
void on_ranks(int T, F&& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mu;
  for (int t = 0; t < T; ++t)
    threads.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace troupe::testing
