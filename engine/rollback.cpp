#include "engine/rollback.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "ckpt/commit.h"
#include "ckpt/durable_io.h"
#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/reader.h"
#include "engine/checkpointing.h"
#include "metrics/error.h"
#include "metrics/jsonl_log.h"
#include "util/durable_file.h"

namespace troupe::engine {
namespace fs = std::filesystem;

std::vector<RecordedRollback> recorded_rollbacks(const std::string& metrics_path) {
  std::vector<RecordedRollback> out;
  if (!fs::is_regular_file(metrics_path)) return out;
  for (const auto& j : metrics::read_jsonl(metrics_path).objects)
    if (j.value("type", "") == "rollback") {
      const auto step = j.find("step"), ids = j.find("skipped_samples");
      if (step == j.end() || !step->is_number_integer() || ids == j.end() || !ids->is_array())
        throw metrics::MetricsError(metrics_path + ": a rollback line without an integer step and a skipped_samples "
                                                   "list: " + j.dump());
      out.push_back({step->get<int64_t>(), ids->get<std::vector<int64_t>>()});
    }
  return out;
}

int64_t rollback_skip_count(const Config& c) {
  const int64_t s = c.logging().rollback_skip_samples();
  return s > 0 ? s : c.batch().global_batch_size();
}

std::variant<RollbackRequest, std::string> decide_rollback(const Config& c, const data::BatchSource& train,
                                                           int64_t spike_step, int64_t consumed_before,
                                                           const std::vector<int64_t>& earlier_spikes) {
  const auto& lg = c.logging();
  std::vector<int64_t> near;
  for (const int64_t s : earlier_spikes)
    if (spike_step - s < lg.rollback_window_steps()) near.push_back(s);
  if (int64_t(near.size()) >= lg.rollback_limit()) {
    std::string steps;
    for (const int64_t s : near) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    // The same step spiking on other samples each time points away from the data.
    const bool same_step = std::all_of(near.begin(), near.end(), [&](int64_t s) { return s == spike_step; });
    return fmt::format("logging.on_spike ROLLBACK: step {} is a spike, and {} rollback(s) already happened within "
                       "logging.rollback_window_steps = {} (spikes at steps {}; logging.rollback_limit = {}): the "
                       "run stops here{}",
                       spike_step, near.size(), lg.rollback_window_steps(), steps, lg.rollback_limit(),
                       same_step ? fmt::format(" (step {} spiked again on other samples each time: that points at the "
                                               "optimizer settings, such as the peak LR or the warmup, more than at "
                                               "the data)",
                                               spike_step)
                                 : std::string());
  }
  const int64_t count = rollback_skip_count(c);
  // Positions of the first epoch under the current skip list: skipping a sample of a
  // later epoch would take it out of the epochs already trained on too (docs/data.md).
  const int64_t first_epoch = train.first_epoch_end();
  if (consumed_before + count > first_epoch)
    return fmt::format("logging.on_spike ROLLBACK: step {} is a spike, but the {} samples to skip (positions {} to "
                       "{} of the run's order) reach past the first epoch ({} samples): skipping them would change "
                       "the order of an epoch already trained on (docs/data.md, \"Skipping samples\"); the run "
                       "stops here",
                       spike_step, count, consumed_before, consumed_before + count - 1, first_epoch);
  RollbackRequest r;
  r.spike_step = spike_step;
  r.first_position = consumed_before;
  for (int64_t i = 0; i < count; ++i) r.skip_ids.push_back(train.sample_at(consumed_before + i));
  std::sort(r.skip_ids.begin(), r.skip_ids.end());
  return r;
}

namespace {

// The step of ROOT's entry `name` when it is a step directory, complete ("step_N") or
// not ("step_N.partial", "step_N.deleting", ...).
std::optional<int64_t> step_of_entry(const std::string& name) {
  return ckpt::parse_step_dir_name(std::string_view(name).substr(0, name.find('.')));
}

}  // namespace

RollbackDone roll_back_checkpoints(const Config& c, int64_t spike_step) {
  RollbackDone d;
  const fs::path root = checkpoint_root(c);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return d;  // no checkpoint was ever written: from scratch
  const int64_t at_most = spike_step - c.logging().rollback_steps();
  const auto steps = ckpt::list_step_dirs(root.string());
  for (auto s = steps.rbegin(); s != steps.rend(); ++s) {
    if (*s > at_most) continue;
    try {
      ckpt::open_step(root.string(), *s);
      d.target_step = *s;
      d.target_dir = (root / ckpt::step_dir_name(*s)).string();
      break;
    } catch (const ckpt::CheckpointError& e) {
      d.report.push_back(e.what());
    }
  }
  // Everything after the kept checkpoint leaves the root's timeline.
  std::vector<std::string> later;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (const auto s = step_of_entry(name); s && *s > d.target_step) later.push_back(name);
  }
  std::sort(later.begin(), later.end());
  const fs::path latest = root / std::string(ckpt::kLatestFile);
  const bool drop_latest = d.target_dir.empty() && fs::exists(latest);
  if (!later.empty() || drop_latest) {
    const fs::path aside = unused_name_beside(root.string(), fmt::format(".rolled-back-{}", spike_step));
    fs::create_directories(aside, ec);
    if (ec) throw ckpt::CheckpointError(fmt::format("{}: cannot create: {}", aside.string(), ec.message()));
    d.aside_dir = aside.string();
    for (const auto& name : later) {
      ckpt::rename_path((root / name).string(), (aside / name).string());
      if (const auto s = step_of_entry(name); s && name == ckpt::step_dir_name(*s)) d.moved_steps.push_back(*s);
    }
    if (drop_latest) ckpt::rename_path(latest.string(), (aside / std::string(ckpt::kLatestFile)).string());
    util::rethrow_file_error_as<ckpt::CheckpointError>([&] {
      util::fsync_dir(aside.string());
      if (!d.target_dir.empty())
        util::write_file_atomically(latest.string(), ckpt::step_dir_name(d.target_step) + "\n");
      util::fsync_dir(root.string());
    });
  }
  return d;
}

}  // namespace troupe::engine
