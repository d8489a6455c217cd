#include "sched/failure_calendar.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace troupe::sched {

namespace {

void check(const FailureModel& m) {
  if (!(m.mtbf_s > 0) || !(m.step_s > 0) || !(m.save_stall_s >= 0) || !(m.recovery_s >= 0) ||
      !std::isfinite(m.mtbf_s) || !std::isfinite(m.step_s) || !std::isfinite(m.save_stall_s) ||
      !std::isfinite(m.recovery_s))
    throw std::invalid_argument("failure model: the mean time between failures and the step time must be positive, "
                                "the save stall and the recovery time not negative");
}

// The n-th uniform in (0, 1) of `seed`'s stream (splitmix64 of the counter): the
// timeline is a function of the seed alone.
double uniform(uint64_t seed, uint64_t n) {
  uint64_t z = seed + (n + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double(z >> 11) + 0.5) / 9007199254740992.0;  // 53 bits, never 0 or 1
}

}  // namespace

double mtbf_seconds(double failures_per_gpu_hour, int64_t gpus) {
  if (!(failures_per_gpu_hour > 0) || !std::isfinite(failures_per_gpu_hour) || gpus < 1)
    throw std::invalid_argument("failure rate: needs a positive rate per GPU-hour and at least one GPU");
  return 3600.0 / (failures_per_gpu_hour * double(gpus));
}

FailureCost failure_cost(const FailureModel& m, int64_t interval_steps) {
  check(m);
  if (interval_steps < 1) throw std::invalid_argument("failure model: the checkpoint interval must be at least 1 step");
  FailureCost f;
  f.interval_steps = interval_steps;
  f.interval_s = double(interval_steps) * m.step_s;
  const double segment = f.interval_s + m.save_stall_s;
  const double redone = m.recovery == Recovery::Restart ? segment / 2 : m.step_s / 2;
  f.lost_per_failure_s = m.recovery_s + redone;
  f.save_fraction = m.save_stall_s / segment;
  f.failure_fraction = f.lost_per_failure_s / m.mtbf_s;
  f.efficiency = std::max(0.0, (1 - f.save_fraction) * (1 - f.failure_fraction));
  return f;
}

double daly_interval_s(const FailureModel& m) {
  check(m);
  return std::max(m.step_s, std::sqrt(2 * m.save_stall_s * m.mtbf_s) - m.save_stall_s);
}

FailureCost best_interval(const FailureModel& m) {
  if (m.recovery != Recovery::Restart)
    throw std::invalid_argument("best_interval: only a restart from the checkpoint redoes work that the interval "
                                "decides (an elastic recovery loses the step in flight whatever it is)");
  // E(K) is unimodal in K (the save share falls, the redone share grows): a coarse sweep
  // from a quarter to four times Daly's interval, then every K around the best.
  const double daly = daly_interval_s(m);
  const auto near = int64_t(std::llround(daly / m.step_s));
  const int64_t lo = std::max<int64_t>(1, near / 4), hi = std::max<int64_t>(lo, near * 4 + 4);
  const int64_t stride = std::max<int64_t>(1, (hi - lo) / 4096);
  FailureCost best = failure_cost(m, lo);
  for (int64_t k = lo; k <= hi; k += stride) {
    const FailureCost c = failure_cost(m, k);
    if (c.efficiency >= best.efficiency) best = c;
  }
  for (int64_t k = std::max<int64_t>(1, best.interval_steps - stride); k <= best.interval_steps + stride; ++k) {
    const FailureCost c = failure_cost(m, k);
    if (c.efficiency > best.efficiency || (c.efficiency == best.efficiency && k > best.interval_steps)) best = c;
  }
  return best;
}

double simulated_efficiency(const FailureModel& m, int64_t interval_steps, double horizon_s, uint64_t seed) {
  check(m);
  if (interval_steps < 1 || !(horizon_s > 0)) throw std::invalid_argument("simulation: bad interval or horizon");
  uint64_t draws = 0;
  auto next_gap = [&] { return -m.mtbf_s * std::log(uniform(seed, draws++)); };
  double t = 0, kept = 0;           // wall clock; committed training seconds
  double failure_at = next_gap();   // the next failure on the wall clock
  // A failure at `failure_at`: recovery runs R from it, started again by any failure
  // that lands inside it (the process is memoryless).
  auto recover = [&] {
    double done = failure_at + m.recovery_s;
    failure_at += next_gap();
    while (failure_at < done) {
      done = failure_at + m.recovery_s;
      failure_at += next_gap();
    }
    t = done;
  };
  const double tau = double(interval_steps) * m.step_s;
  if (m.recovery == Recovery::Restart) {
    // Segments of tau training then C saving; a failure before the save completes
    // loses the whole segment's work.
    while (t < horizon_s) {
      const double end = t + tau + m.save_stall_s;
      if (failure_at >= end) {
        t = end;
        kept += tau;
      } else {
        recover();
      }
    }
  } else {
    // Steps one by one; a failure loses the step in flight. Every interval_steps steps a
    // save stalls training for C; a failure during it costs the recovery only.
    int64_t steps = 0;
    while (t < horizon_s) {
      const double end = t + m.step_s;
      if (failure_at >= end) {
        t = end;
        kept += m.step_s;
        if (++steps % interval_steps == 0) {
          double save_end = t + m.save_stall_s;
          while (failure_at < save_end) {
            const double before = failure_at;
            recover();
            save_end += t - before;
          }
          t = save_end;
        }
      } else {
        recover();
      }
    }
  }
  return kept / t;
}

}  // namespace troupe::sched
