// TensorBoard event files: `tensorboard --logdir RUN_DIR` shows troupe's curves.
// A file is a TFRecord stream (metrics/tfrecord.h) of tensorboard::Event protos
// (messages/tensorboard.proto): first a file_version "brain.Event:2" record, then one
// Summary event per step holding every scalar of that step. Each event reaches the
// kernel in one write(2) before the call returns (flushed per step).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/files.h"
#include "metrics/step_record.h"
#include "metrics/superseded_events.h"

namespace troupe::metrics {

// The scalar tags of a training step, in the order they are written.
inline constexpr const char* kStepScalarTags[] = {
    "loss",         "lr",          "grad_norm", "clipped",     "skipped",
    "tokens_per_s", "loss_tokens", "padding",   "step_time_s", "restarts"};
inline constexpr const char* kEvalLossTag = "eval/loss";

// The values of kStepScalarTags for one step (clipped/skipped as 0 or 1; tokens_per_s
// from tokens_per_second; padding is padding_tokens).
std::vector<std::pair<std::string, double>> step_scalars(const StepRecord& r);

// "events.out.tfevents.<unix seconds, 10 digits>.<hostname>" (TensorFlow's name).
std::string event_file_name(int64_t unix_seconds, const std::string& hostname);

// This machine's host name (gethostname), "localhost" if it has none.
std::string host_name();

class EventFileWriter {
 public:
  // Creates a new event file in `dir` (which must exist) named by event_file_name;
  // when that name is taken (a second writer within the same second) ".1", ".2", ...
  // is appended, which keeps the files in the order TensorBoard reads them. Writes
  // the file_version record at step 0.
  EventFileWriter(const std::string& dir, double wall_time);

  // One Summary event with `values` as simple_value scalars.
  void scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  void step(const StepRecord& r) { scalars(r.step, r.wall_time, step_scalars(r)); }
  // eval/loss, and with a blend each dataset's as eval/datasets/<d>_<name>/loss.
  void eval(const EvalRecord& r);
  // A SessionLog START at `step`: TensorBoard drops the events of this run with
  // step >= `step` written before it. Write it before the first step after a
  // restart from a checkpoint (step = checkpoint step + 1), so redone steps show once.
  // Then the other event files in this file's folder (earlier processes', earlier
  // metrics actors') are cut to what TensorBoard keeps of them (drop_superseded_events),
  // so readers that take each file alone show each step once too; what was cut and
  // the files left as they were come back, nothing is thrown for them.
  SupersededEvents session_start(int64_t step, double wall_time);
  // fdatasync the file (end of run).
  void sync() { file_.sync(); }

  const std::string& path() const { return file_.path(); }

 private:
  void write_event(const std::string& serialized);
  AppendFile file_;
};

}  // namespace troupe::metrics
