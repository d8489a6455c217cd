#include "metrics/run_dir.h"

#include <filesystem>
#include <system_error>

#include "metrics/error.h"
#include "metrics/files.h"

namespace troupe::metrics {
namespace fs = std::filesystem;

RunDirLayout run_dir_layout(const std::string& root) {
  const fs::path r(root);
  return {root,
          (r / "config.textproto").string(),
          (r / "metrics.jsonl").string(),
          (r / "spikes.jsonl").string(),
          (r / "events").string(),
          (r / "checkpoints").string(),
          (r / "logs").string(),
          (r / "acceptance").string()};
}

namespace {

void make_dir(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) throw MetricsError(path + ": exists and is not a directory");
    return;
  }
  fs::create_directories(path, ec);
  if (ec) throw MetricsError(path + ": cannot create directory: " + ec.message());
}

}  // namespace

PreparedRunDir prepare_run_dir(const std::string& root, std::string_view config_text) {
  if (root.empty()) throw MetricsError("run directory: empty path (logging.run_dir)");
  PreparedRunDir out;
  out.layout = run_dir_layout(root);
  std::error_code ec;
  out.existed = fs::exists(root, ec);
  make_dir(root);
  for (const auto* dir : {&out.layout.events, &out.layout.checkpoints, &out.layout.logs, &out.layout.acceptance})
    make_dir(*dir);

  const std::string& cfg = out.layout.config;
  if (fs::exists(cfg, ec)) {
    if (!fs::is_regular_file(cfg, ec)) throw MetricsError(cfg + ": exists and is not a regular file");
    if (read_file(cfg) != config_text) {
      // Keep the earlier config under the first free numbered name. The rename is made
      // durable by the fsync of this folder that write_file_atomic does below, once the
      // new config is in place beside it (both names live in the one folder).
      for (int n = 1;; ++n) {
        const std::string kept = cfg + "." + std::to_string(n);
        if (fs::exists(kept, ec)) continue;
        fs::rename(cfg, kept, ec);
        if (ec) throw MetricsError(cfg + ": cannot keep the earlier config as " + kept + ": " + ec.message());
        out.previous_config = kept;
        break;
      }
    }
  }
  write_file_atomic(cfg, config_text);
  return out;
}

}  // namespace troupe::metrics
