// CAF's scheduler as every troupe process runs it (local runs, the cluster's
// supervisor and its workers).
#pragma once

#include <algorithm>
#include <thread>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

namespace troupe::actors {

inline void configure_scheduler(caf::actor_system_config& cfg) {
  // At least 2 workers: a worker blocked for a moment must not stall the others.
  cfg.set("scheduler.max-threads", std::max(2u, std::thread::hardware_concurrency()));
  // Idle workers must sleep, not poll. CAF 0.17's default work stealing polls for about
  // 25 ms after each message with 50 us sleeps, and every wake-up preempts a compute
  // thread (kernels partition their work statically, so one delayed participant delays
  // the whole op): on 2 cores that multiplied a run's context switches (the counts:
  // docs/performance.md, "Numbers the code's comments rely on"). Work sharing waits on
  // a condition variable; the actors exchange a few messages per op, so one shared
  // queue is no bottleneck.
  cfg.set("scheduler.policy", caf::atom("sharing"));
}

}  // namespace troupe::actors
