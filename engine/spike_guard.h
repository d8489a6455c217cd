// logging.on_spike SKIP_UPDATE and ROLLBACK (docs/metrics.md, "Acting on a spike"):
// whether a train step's update is dropped because the step is a spike (ROLLBACK then
// restarts the group from an earlier checkpoint: engine/rollback.h). The coordinator asks once per
// step, after the step's loss and pre-clip gradient norm are both in and before the
// update goes out. The rule and its windows are the spike record's
// (metrics/spike_detector.h), so the guard drops exactly the updates of the steps that
// spikes.jsonl records; a restarted coordinator rebuilds the windows from the steps of
// the timeline it resumes (warm).
#pragma once

#include <cstdint>
#include <vector>

#include "messages/config.pb.h"
#include "metrics/spike_detector.h"

namespace troupe::engine {

class SpikeGuard {
 public:
  explicit SpikeGuard(const Config& c);

  // Whether the guard acts at all (on_spike is not RECORD).
  bool active() const { return active_; }
  // Whether a spike rolls the run back (ROLLBACK) rather than only dropping its update.
  bool rolls_back() const { return rolls_back_; }
  // Judges the step (then adds its finite values to the windows) and returns whether
  // its update is to be dropped: always false when not active.
  bool drop_update(int64_t step, double loss, double grad_norm);
  // An earlier step of the timeline, oldest first, without judging it.
  void warm(double loss, double grad_norm) { detector_.warm(loss, grad_norm); }
  // The windows of the timeline up to `through_step` from metrics.jsonl-style step
  // objects: the last object of each step number counts (metrics::warm_spike_windows).
  void warm(const std::vector<metrics::Json>& step_lines, int64_t through_step) {
    metrics::warm_spike_windows(step_lines, through_step, detector_);
  }
  size_t history() const { return detector_.history(); }

 private:
  bool active_ = false, rolls_back_ = false;
  metrics::SpikeDetector detector_;
};

// The detector options of a config's logging section.
metrics::SpikeOptions spike_options(const LoggingConfig& lc);

}  // namespace troupe::engine
