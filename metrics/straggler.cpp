#include "metrics/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>

#include "metrics/spike_detector.h"

namespace troupe::metrics {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  std::sort(values.begin(), values.end());
  // Smallest rank k (1-based) with k >= q * n; the epsilon keeps 0.95 * 20 at 19.
  size_t k = size_t(std::ceil(q * double(values.size()) - 1e-9));
  k = std::clamp<size_t>(k, 1, values.size());
  return values[k - 1];
}

void DurationSeries::add(double seconds) {
  ++count_;
  total_ += seconds;
  if (capacity_ == 0) return;
  if (ring_.size() < capacity_) {
    ring_.push_back(seconds);
  } else {
    ring_[next_] = seconds;
    next_ = (next_ + 1) % capacity_;
  }
}

DurationStats DurationSeries::stats() const {
  DurationStats s;
  s.count = count_;
  s.total_s = total_;
  if (!ring_.empty()) {
    s.median_s = median_of(ring_);
    s.p95_s = percentile(ring_, 0.95);
    s.max_s = *std::max_element(ring_.begin(), ring_.end());
  }
  return s;
}

TimingLog::Series& TimingLog::series(const std::string& actor) {
  auto it = actors_.find(actor);
  if (it == actors_.end()) it = actors_.emplace(actor, Series{DurationSeries(capacity_), DurationSeries(capacity_)}).first;
  return it->second;
}

void TimingLog::compute(const std::string& actor, double seconds) { series(actor).compute.add(seconds); }
void TimingLog::wait(const std::string& actor, double seconds) { series(actor).wait.add(seconds); }

std::string peer_group(const std::string& actor_path) {
  static const std::regex kDp("(^|/)dp[0-9]+(/|$)");
  return std::regex_replace(actor_path, kDp, "$1dp*$2", std::regex_constants::format_first_only);
}

StragglerReport straggler_report(const TimingLog& log, double threshold, size_t max_named) {
  StragglerReport r;
  r.threshold = threshold;
  // Compute medians of each peer group, by actor.
  std::map<std::string, std::map<std::string, double>> groups;
  for (const auto& [actor, series] : log.actors()) {
    ActorTiming t;
    t.actor = actor;
    t.peer_group = peer_group(actor);
    t.compute = series.compute.stats();
    t.wait = series.wait.stats();
    const double busy = t.compute.total_s + t.wait.total_s;
    t.wait_fraction = busy > 0 ? t.wait.total_s / busy : 0;
    if (t.compute.count > 0) groups[t.peer_group][actor] = t.compute.median_s;
    r.actors.push_back(std::move(t));
  }
  for (auto& t : r.actors) {
    if (t.compute.count == 0) continue;
    std::vector<double> others;
    for (const auto& [actor, med] : groups[t.peer_group])
      if (actor != t.actor) others.push_back(med);
    const double ref = median_of(others);
    t.slowdown = ref > 0 ? t.compute.median_s / ref : 1;
  }
  std::vector<const ActorTiming*> named;
  for (const auto& t : r.actors)
    if (t.slowdown >= threshold) named.push_back(&t);
  std::stable_sort(named.begin(), named.end(),
                   [](const ActorTiming* a, const ActorTiming* b) { return a->slowdown > b->slowdown; });
  for (size_t i = 0; i < named.size() && i < max_named; ++i) r.slowest.push_back(named[i]->actor);
  return r;
}

namespace {

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", seconds * 1e3);
  return buf;
}

}  // namespace

std::string format_straggler_report(const StragglerReport& r) {
  size_t width = 5;
  for (const auto& t : r.actors) width = std::max(width, t.actor.size());
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s %8s %11s %11s %11s %11s %6s %9s\n", int(width), "actor", "mbs", "comp_med_ms",
                "comp_p95_ms", "wait_med_ms", "wait_p95_ms", "wait%", "slowdown");
  out += buf;
  for (const auto& t : r.actors) {
    std::snprintf(buf, sizeof buf, "%-*s %8lld %11s %11s %11s %11s %5.1f%% %8.2fx\n", int(width), t.actor.c_str(),
                  static_cast<long long>(t.compute.count), ms(t.compute.median_s).c_str(), ms(t.compute.p95_s).c_str(),
                  ms(t.wait.median_s).c_str(), ms(t.wait.p95_s).c_str(), 100.0 * t.wait_fraction, t.slowdown);
    out += buf;
  }
  if (r.slowest.empty()) {
    std::snprintf(buf, sizeof buf, "no straggler: every rank within %.0f%% of its peers' median compute time\n",
                  (r.threshold - 1) * 100);
    out += buf;
    return out;
  }
  out += "slowest ranks:";
  for (size_t i = 0; i < r.slowest.size(); ++i) {
    const auto it = std::find_if(r.actors.begin(), r.actors.end(),
                                 [&](const ActorTiming& t) { return t.actor == r.slowest[i]; });
    std::snprintf(buf, sizeof buf, "%s %s (%.2fx its peers, median %s ms)", i ? "," : "", it->actor.c_str(),
                  it->slowdown, ms(it->compute.median_s).c_str());
    out += buf;
  }
  out += "\n";
  return out;
}

}  // namespace troupe::metrics
