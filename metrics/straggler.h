// Straggler statistics (issue 10): per actor path, the compute time of each
// microbatch and the time spent waiting on messages, summarised as median and p95,
// and a report naming the slowest ranks. A rank is judged against its peers: the
// actors whose paths differ only in the data-parallel coordinate ("stage/dp*/pp0/tp0"),
// because they run the same layers on the same amount of data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::metrics {

// Nearest-rank percentile: the smallest value with at least q of the values at or
// below it (q in (0, 1]); 0 for no values. p95 of 1..20 is 19; p95 of 1..100 is 95.
double percentile(std::vector<double> values, double q);

struct DurationStats {
  int64_t count = 0;  // all recorded
  double total_s = 0; // sum over all recorded
  double median_s = 0, p95_s = 0, max_s = 0;  // over the retained window
};

// The durations of one actor. Counts and totals cover every sample; the median and
// p95 cover the most recent `capacity` samples, so that memory stays bounded in a
// long run.
class DurationSeries {
 public:
  explicit DurationSeries(size_t capacity = 4096) : capacity_(capacity) {}
  void add(double seconds);
  DurationStats stats() const;
  const std::vector<double>& retained() const { return ring_; }

 private:
  size_t capacity_;
  std::vector<double> ring_;  // oldest overwritten first once full
  size_t next_ = 0;
  int64_t count_ = 0;
  double total_ = 0;
};

// Recorded timings of every actor, keyed by actor path.
class TimingLog {
 public:
  explicit TimingLog(size_t capacity_per_actor = 4096) : capacity_(capacity_per_actor) {}
  // Compute time of one microbatch's forward or backward (or one optimizer step).
  void compute(const std::string& actor, double seconds);
  // Time the actor sat idle waiting for a message it needed (activations, gradients, params).
  void wait(const std::string& actor, double seconds);

  struct Series {
    DurationSeries compute, wait;
  };
  const std::map<std::string, Series>& actors() const { return actors_; }

 private:
  Series& series(const std::string& actor);
  size_t capacity_;
  std::map<std::string, Series> actors_;
};

// "stage/dp1/pp0/tp0" -> "stage/dp*/pp0/tp0"; a path with no "dp<N>" segment is its own group.
std::string peer_group(const std::string& actor_path);

struct ActorTiming {
  std::string actor;
  std::string peer_group;
  DurationStats compute, wait;
  // wait total / (compute total + wait total); 0 when both are 0.
  double wait_fraction = 0;
  // compute median / median of the compute medians of the actor's peers, itself
  // left out (so that with two replicas the slow one is measured against the other,
  // not against their mean). 1 with no peers or no compute recorded.
  double slowdown = 1;
};

struct StragglerReport {
  std::vector<ActorTiming> actors;     // by actor path
  std::vector<std::string> slowest;    // stragglers, largest slowdown first
  double threshold = 0;                // slowdown at or above which a rank is named
};

// Summarises `log`; names every rank whose slowdown >= `threshold` (default: 10%
// slower than its peers' median), at most `max_named`, slowest first.
StragglerReport straggler_report(const TimingLog& log, double threshold = 1.10, size_t max_named = 5);

// The report as text: a table (actor, microbatches, compute median/p95, wait
// median/p95, wait share, slowdown) and a closing line naming the slowest ranks,
// or saying that none is past the threshold. '\n'-terminated lines.
std::string format_straggler_report(const StragglerReport& r);

}  // namespace troupe::metrics
