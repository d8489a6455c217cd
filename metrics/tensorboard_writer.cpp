#include "metrics/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "messages/tensorboard.pb.h"
#include "metrics/error.h"
#include "metrics/tfrecord.h"

namespace troupe::metrics {
namespace {

// Picks the first free name; AppendFile's exclusive create makes the choice race-free.
AppendFile create_event_file(const std::string& dir, double wall_time) {
  if (!std::filesystem::is_directory(dir)) throw MetricsError(dir + ": event file directory does not exist");
  const std::string base = (std::filesystem::path(dir) / event_file_name(int64_t(std::floor(wall_time)), host_name())).string();
  for (int n = 0;; ++n) {
    const std::string path = n == 0 ? base : base + "." + std::to_string(n);
    try {
      return AppendFile(path, AppendFile::Create::kExclusive, /*line_oriented=*/false);
    } catch (const MetricsError&) {
      if (!std::filesystem::exists(path) || n >= 1000) throw;
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> step_scalars(const StepRecord& r) {
  std::vector<std::pair<std::string, double>> out = {{kStepScalarTags[0], r.loss},
          {kStepScalarTags[1], r.lr},
          {kStepScalarTags[2], r.grad_norm},
          {kStepScalarTags[3], r.clipped ? 1.0 : 0.0},
          {kStepScalarTags[4], r.skipped ? 1.0 : 0.0},
          {kStepScalarTags[5], tokens_per_second(r)},
          {kStepScalarTags[6], double(r.loss_tokens)},
          {kStepScalarTags[7], double(r.padding_tokens)},
          {kStepScalarTags[8], r.step_time_s},
          {kStepScalarTags[9], double(r.restarts)}};
  // A blend's datasets: what each gave so far.
  for (size_t i = 0; i < r.datasets.size(); ++i) {
    const std::string tag = "datasets/" + dataset_tag(i, r.datasets[i].prefix);
    out.push_back({tag + "/consumed_samples", double(r.datasets[i].consumed_samples)});
    out.push_back({tag + "/consumed_tokens", double(r.datasets[i].consumed_tokens)});
  }
  return out;
}

void EventFileWriter::eval(const EvalRecord& r) {
  std::vector<std::pair<std::string, double>> values = {{kEvalLossTag, r.loss}};
  for (size_t i = 0; i < r.datasets.size(); ++i)
    values.push_back({"eval/datasets/" + dataset_tag(i, r.datasets[i].prefix) + "/loss", r.datasets[i].loss});
  scalars(r.step, r.wall_time, values);
}

std::string event_file_name(int64_t unix_seconds, const std::string& hostname) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(unix_seconds));
  return std::string("events.out.tfevents.") + digits + "." + hostname;
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

EventFileWriter::EventFileWriter(const std::string& dir, double wall_time)
    : file_(create_event_file(dir, wall_time)) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(0);
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
}

void EventFileWriter::scalars(int64_t step, double wall_time,
                              const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  auto* summary = e.mutable_summary();
  for (const auto& [tag, v] : values) {
    auto* value = summary->add_value();
    value->set_tag(tag);
    value->set_simple_value(static_cast<float>(v));
  }
  write_event(e.SerializeAsString());
}

SupersededEvents EventFileWriter::session_start(int64_t step, double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  e.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  write_event(e.SerializeAsString());
  const std::filesystem::path own(path());
  return drop_superseded_events(own.parent_path().string(), step, own.filename().string());
}

void EventFileWriter::write_event(const std::string& serialized) { file_.append(frame_tfrecord(serialized)); }

}  // namespace troupe::metrics
