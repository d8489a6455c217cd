#include "apps/supervisor/placement_history.h"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/manifest.h"
#include "config/text_format.h"
#include "metrics/jsonl_log.h"

namespace troupe::cli {

namespace fs = std::filesystem;

namespace {

std::string replicas(int64_t n) { return fmt::format("{} physical replica{}", n, n == 1 ? "" : "s"); }

}  // namespace

void print_placement_history(const std::string& run_dir, std::ostream& out) {
  const fs::path dir(run_dir);
  const fs::path config_path = dir / "config.textproto";
  if (!fs::is_regular_file(config_path))
    throw std::invalid_argument(config_path.string() + ": missing: RUN_DIR is not a run directory");
  const Config c = config::load_config_file(config_path.string());
  const auto& p = c.parallel();
  const int64_t started = p.physical_replicas() > 0 ? p.physical_replicas() : p.data();
  out << fmt::format("{}: logical layout data {} x pipeline {} x tensor {}\n", run_dir, p.data(), p.pipeline(),
                     p.tensor());
  out << fmt::format("  start       {} (parallel.physical_replicas)\n", replicas(started));

  // What metrics.jsonl records of each change, in the order it happened.
  const fs::path metrics_path = dir / "metrics.jsonl";
  if (fs::exists(metrics_path)) {
    for (const auto& j : metrics::read_jsonl(metrics_path.string()).objects) {
      const std::string type = j.value("type", "");
      const int64_t step = j.value("step", int64_t(0));
      if (type == "recovery" && j.contains("physical_replicas"))
        out << fmt::format("  step {:<6} restart {} after a failure: on {}\n", step, j.value("restarts", int64_t(0)),
                           replicas(j.at("physical_replicas").get<int64_t>()));
      else if (type == "grow")
        out << fmt::format("  step {:<6} grew from {} to {} onto a worker that joined (resumed at step {})\n", step,
                           j.value("from_physical_replicas", int64_t(0)), j.value("physical_replicas", int64_t(0)),
                           j.value("resume_step", int64_t(0)));
      else if (type == "regroup_dropped")
        out << fmt::format("  step {:<6} a grow was dropped (its checkpoint failed): stayed on {}\n", step,
                           replicas(j.value("physical_replicas", int64_t(0))));
    }
  } else {
    out << fmt::format("  ({}: none)\n", metrics_path.string());
  }

  // The placement that wrote each checkpoint still on disk.
  const std::string root = c.checkpoint().dir().empty() ? (dir / "checkpoints").string() : c.checkpoint().dir();
  if (!fs::is_directory(root)) {
    out << fmt::format("checkpoints: none ({} is not a directory)\n", root);
    return;
  }
  out << fmt::format("checkpoints in {}:\n", root);
  for (const int64_t step : ckpt::list_step_dirs(root)) {
    const std::string step_dir = (fs::path(root) / ckpt::step_dir_name(step)).string();
    try {
      const auto t = ckpt::read_manifest(step_dir).topology();
      out << fmt::format("  step {:<6} written by {}\n", step,
                         replicas(t.physical_replicas() > 0 ? t.physical_replicas() : t.data()));
    } catch (const ckpt::CheckpointError& e) {
      out << fmt::format("  step {:<6} manifest unreadable: {}\n", step, e.what());
    }
  }
}

}  // namespace troupe::cli
