// The run directory (docs/metrics.md describes it for users):
//
//   RUN_DIR/
//     config.textproto        the config the run used (earlier differing copies kept
//                             as config.textproto.1, .2, ... when a run is resumed with changes)
//     metrics.jsonl           one JSON object per step and per event
//     spikes.jsonl            loss-spike records
//     events/                 TensorBoard event files (tensorboard --logdir RUN_DIR)
//     checkpoints/            one directory per saved step, and `latest`
//     logs/                   spdlog files
//     acceptance/             the acceptance ladder's report (report.md, report.json)
#pragma once

#include <string>
#include <string_view>

namespace troupe::metrics {

struct RunDirLayout {
  std::string root;
  std::string config;       // root/config.textproto
  std::string metrics;      // root/metrics.jsonl
  std::string spikes;       // root/spikes.jsonl
  std::string events;       // root/events
  std::string checkpoints;  // root/checkpoints
  std::string logs;         // root/logs
  std::string acceptance;   // root/acceptance
};

// The paths of the layout under `root` (nothing is touched).
RunDirLayout run_dir_layout(const std::string& root);

struct PreparedRunDir {
  RunDirLayout layout;
  bool existed = false;  // root was there already (a resumed or repeated run)
  // A config.textproto with other contents was there; it was kept under this name.
  std::string previous_config;
};

// Creates root and its folders (events, checkpoints, logs, acceptance) as needed and
// writes `config_text` to config.textproto durably (temporary name, fsync, rename).
// Throws MetricsError naming the path when root or a folder exists as a non-folder
// or cannot be created.
PreparedRunDir prepare_run_dir(const std::string& root, std::string_view config_text);

}  // namespace troupe::metrics
