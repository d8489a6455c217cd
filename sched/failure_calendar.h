// The calendar with failures (docs/planner.md, "The calendar with failures"): how much
// of the wall time a run keeps for training when its machines fail at a given rate and
// it recovers in a given way, the checkpoint interval that keeps the most, and the
// calendar days that follow. The seed's assumed 90 % calendar efficiency becomes an
// output of measured parts: the failure rate, the time a save stalls training and the
// time from a failure to training again.
//
// The model (first order in the failure rate, as Young's and Daly's): training saves
// a checkpoint every tau seconds of training, each save stalling it for C seconds, so a
// segment of wall time is tau + C. Failures arrive as a Poisson process of mean time
// between failures M (the cluster's: 1 / (rate per GPU-hour x GPUs)). Each failure
// costs the recovery time R and the work it throws away:
//   RESTART (from the newest complete checkpoint): on average half a segment,
//            (tau + C) / 2, computed again;
//   ELASTIC  (survivors adopt the lost replicas; issue 54, not built yet): the step in
//            flight, half a step on average; R is then detection and adoption.
// The kept fraction of wall time is
//   E = tau / (tau + C) x (1 - L / M),   L = R + (lost work per failure)
// and the RESTART interval that maximises it is near Daly's tau* = sqrt(2 C M) - C
// (Young's sqrt(2 C M) without the correction); whole steps are tried around it.
#pragma once

#include <cstdint>
#include <optional>

namespace troupe::sched {

enum class Recovery { Restart, Elastic };

struct FailureModel {
  double mtbf_s = 0;          // the cluster's mean time between failures, seconds
  double save_stall_s = 0;    // C: seconds one checkpoint save stalls training
  double recovery_s = 0;      // R: failure to training again (detection, restart, reload)
  double step_s = 0;          // one training step, seconds
  Recovery recovery = Recovery::Restart;
};

// The cluster's mean time between failures from a rate per GPU-hour.
double mtbf_seconds(double failures_per_gpu_hour, int64_t gpus);

// What a checkpoint interval of `interval_steps` keeps under `m`.
struct FailureCost {
  int64_t interval_steps = 0;
  double interval_s = 0;          // tau
  double lost_per_failure_s = 0;  // L: recovery plus the work computed again
  double save_fraction = 0;       // C / (tau + C)
  double failure_fraction = 0;    // L / M
  double efficiency = 0;          // E; 0 when failures take all the time (L >= M)
};
FailureCost failure_cost(const FailureModel& m, int64_t interval_steps);

// Daly's interval in seconds (sqrt(2 C M) - C, at least one step), and the whole
// number of steps near it that keeps the most under RESTART (ties: the longer
// interval). Under ELASTIC the interval decides only the save share (nothing past the
// step in flight is redone), so there is no best one: std::invalid_argument.
double daly_interval_s(const FailureModel& m);
FailureCost best_interval(const FailureModel& m);

// Fraction of wall time kept by a timeline of `horizon_s` simulated with failures drawn
// from a Poisson process of mean m.mtbf_s (counter-based: the same seed gives the same
// timeline), saving every interval_steps and recovering as m says: the check of E.
double simulated_efficiency(const FailureModel& m, int64_t interval_steps, double horizon_s, uint64_t seed);

}  // namespace troupe::sched
