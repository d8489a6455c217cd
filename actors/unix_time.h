// The wall clock as the run's records carry it: Unix seconds with a fraction (metrics
// `time`, StageTiming::end_time, failure and recovery records).
#pragma once

#include <chrono>

namespace troupe::actors {

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace troupe::actors
