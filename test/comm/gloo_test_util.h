// Helpers for the Gloo communicator tests: groups of threads with their own Gloo
// contexts, and peer processes made with fork() that always end by themselves.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "test/support/scratch_dir.h"

namespace gloo_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline troupe::comm::GlooOptions options(std::chrono::milliseconds timeout = 10000ms,
                                         troupe::comm::GlooReduction r = troupe::comm::GlooReduction::kRankOrder) {
  troupe::comm::GlooOptions o;
  o.timeout = timeout;
  o.reduction = r;
  return o;
}

// A prefix no other test (or run) uses.
inline std::string fresh_prefix(const std::string& what) {
  static std::atomic<int> n{0};
  return what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Connects `n` members, one thread each, through one in-memory store, runs fn(rank,
// comm) on each and rethrows the first failure after all threads ended.
inline void run_threads(int n, const std::string& name,
                        const std::function<void(int, troupe::comm::Communicator&)>& fn,
                        const troupe::comm::GlooOptions& opt = options()) {
  troupe::comm::MemoryStore store;
  const std::string prefix = fresh_prefix(name);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto c = troupe::comm::connect_gloo(store, prefix, name, r, n, opt);
        fn(r, *c);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

using troupe::testing::ScratchDir;  // test/support/scratch_dir.h

// Forks a peer process that runs fn() and exits with its return value (3 on an
// exception). It dies with its parent and after `limit` at the latest (SIGALRM), so it
// always ends by itself. Call before this process has Gloo objects alive.
inline pid_t fork_peer(const std::function<int()>& fn, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(4);
  ::alarm(unsigned(limit.count()));
  int rc = 3;
  try {
    rc = fn();
  } catch (...) {
  }
  ::_exit(rc);
}

// Waits for a child's exit status, killing it after `limit`; -signal when it was killed.
inline int wait_peer(pid_t pid, std::chrono::milliseconds limit = 30000ms) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Integer-valued test data: sums of a few members stay exact in fp32.
inline float value(size_t i, int rank, int iter = 0) {
  return float((i * 7 + size_t(rank) * 13 + size_t(iter) * 3) % 101);
}

}  // namespace gloo_test
