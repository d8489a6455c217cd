#include "metrics/run_history.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "metrics/error.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"

namespace troupe::metrics {
namespace {

// Wall-clock position of each line: seconds since its process's startup record plus
// the length of the processes before it.
class WallClock {
 public:
  double at(const Json& line) {
    const double t = number_from_json(line.at("time"), "time");
    if (line.value("type", "") == "startup" || !started_) {
      if (started_) offset_ += last_ - start_;
      start_ = t;
      started_ = true;
    }
    last_ = std::max(last_, t);
    return offset_ + std::max(0.0, t - start_);
  }

 private:
  bool started_ = false;
  double start_ = 0, last_ = 0, offset_ = 0;
};

}  // namespace

RunHistory run_history_from(const std::string& dir, const std::vector<Json>& metrics_lines,
                            const std::vector<Json>& spike_lines) {
  RunHistory h;
  h.dir = dir;
  std::map<int64_t, HistoryStep> steps;  // step number -> its last line
  std::map<int64_t, std::pair<double, double>> evals;  // step number -> (loss, wall of its line)
  WallClock clock;
  int64_t line_no = 0;
  for (const auto& j : metrics_lines) {
    ++line_no;
    const std::string type = j.value("type", "");
    try {
      const double wall = clock.at(j);
      if (type == "step") {
        HistoryStep s;
        s.record = step_from_json(j);
        s.at.wall_s = wall;
        steps[s.record.step] = s;
      } else if (type == "eval") {
        evals[j.at("step").get<int64_t>()] = {number_from_json(j.at("loss"), "loss"), wall};
      }
    } catch (const std::exception& e) {  // MetricsError, or a JSON field of the wrong kind
      throw MetricsError(dir + "/metrics.jsonl: object " + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (steps.empty()) throw MetricsError(dir + "/metrics.jsonl: no step records");

  RunPosition cum;
  std::map<int64_t, RunPosition> at_step{{0, cum}};
  for (auto& [n, s] : steps) {
    const auto& r = s.record;
    cum.step = n;
    cum.input_tokens += r.input_tokens;
    cum.loss_tokens += r.loss_tokens;
    cum.real_tokens += real_tokens(r);
    cum.train_s += r.step_time_s;
    cum.wall_s = s.at.wall_s;
    s.at = cum;
    at_step[n] = cum;
    h.skipped += r.skipped ? 1 : 0;
    h.clipped += r.clipped ? 1 : 0;
    h.steps.push_back(s);
  }
  for (const auto& [n, e] : evals) {
    const auto it = at_step.find(n);
    if (it == at_step.end()) continue;  // a pass after a step no longer on the timeline
    HistoryEval ev;
    ev.loss = e.first;
    ev.at = it->second;
    ev.at.wall_s = e.second;
    h.evals.push_back(ev);
  }
  std::set<int64_t> spike_steps;
  for (const auto& j : spike_lines)
    if (j.value("type", "") == "spike" && j.contains("step") && j.at("step").is_number_integer())
      spike_steps.insert(j.at("step").get<int64_t>());
  h.spikes = int64_t(spike_steps.size());
  return h;
}

RunHistory load_run_history(const std::string& run_dir) {
  const auto layout = run_dir_layout(run_dir);
  if (!std::filesystem::is_regular_file(layout.metrics))
    throw MetricsError(layout.metrics + ": no such file (is " + run_dir + " a run directory?)");
  const auto metrics = read_jsonl(layout.metrics).objects;
  std::vector<Json> spikes;
  if (std::filesystem::exists(layout.spikes)) spikes = read_jsonl(layout.spikes).objects;
  return run_history_from(run_dir, metrics, spikes);
}

}  // namespace troupe::metrics
