// Work split over threads that are all joined before the call returns, whatever
// happens. A thread that cannot be started (a process or memory limit: std::thread
// throws std::system_error) ends the call with one error naming what could not be had,
// after the threads already started have finished: a joinable std::thread destroyed
// while the error unwinds would abort the whole process instead.
#pragma once

#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace troupe::util {

// Runs task(p) for p in [0, n) on n threads and joins them. `what` names the work in the
// error ("initialising parameters").
template <class Task>
void run_on_threads(int n, const std::string& what, Task&& task) {
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  std::string failure;
  try {
    for (int p = 0; p < n; ++p) threads.emplace_back([&task, p] { task(p); });
  } catch (const std::system_error& e) {
    failure = what + ": cannot start thread " + std::to_string(threads.size() + 1) + " of " + std::to_string(n) +
              ": " + e.what();
  }
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);
}

}  // namespace troupe::util
