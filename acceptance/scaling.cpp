#include "acceptance/scaling.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <cmath>

#include <fmt/format.h>

#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "actors/runtime.h"
#include "config/derived.h"
#include "config/validate.h"
#include "metrics/files.h"
#include "metrics/human_units.h"
#include "metrics/json_records.h"

namespace troupe::acceptance {
namespace {

// Right-aligned columns, two spaces apart; the first column left-aligned.
std::string render(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = " ";
    for (size_t i = 0; i < r.size(); ++i)
      line += i == 0 ? " " + r[i] + std::string(width[i] - r[i].size(), ' ')
                     : "  " + std::string(width[i] - r[i].size(), ' ') + r[i];
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

// null when not measured; a measured value as metrics.jsonl writes numbers.
metrics::Json optional_number(const std::optional<double>& v) {
  return v ? metrics::json_number(*v) : metrics::Json(nullptr);
}

}  // namespace

void compute_steps(std::vector<ScalingRow>& rows) {
  const ScalingRow* prev = nullptr;
  for (auto& r : rows) {
    r.step.reset();
    if (!r.tokens_per_s) continue;
    if (prev)
      r.step = sched::scaling_step({prev->ranks, prev->tokens_per_s}, {r.ranks, r.tokens_per_s});
    prev = &r;
  }
}

std::string format_scaling_table(const std::vector<ScalingRow>& rows, const std::string& rank_label) {
  std::vector<std::vector<std::string>> t = {
      {rank_label, "DP", "microbatches", "tokens/s", "speed-up", "scaling efficiency", "median step"}};
  for (const auto& r : rows) {
    t.push_back({metrics::format_thousands(r.ranks), metrics::format_thousands(r.data_parallel),
                 r.microbatches > 0 ? metrics::format_thousands(r.microbatches) : "-",
                 r.tokens_per_s ? metrics::format_thousands(int64_t(std::llround(*r.tokens_per_s))) : "not measured",
                 r.step ? fmt::format("{:.2f}x", r.step->speedup) : "-",
                 r.step ? fmt::format("{:.0f}%", r.step->efficiency * 100) : "-",
                 r.window ? fmt::format("{:.3f} s", r.window->median_step_s) : "-"});
  }
  return render(t);
}

std::vector<int> parse_dp_list(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 1)
      throw std::invalid_argument(fmt::format("--dp {}: '{}' is not a positive integer", text, item));
    if (!out.empty() && v <= out.back())
      throw std::invalid_argument(fmt::format("--dp {}: sizes must ascend ({} after {})", text, v, out.back()));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

ScalingReport run_scaling(const Config& config, const ScalingOptions& o) {
  namespace fs = std::filesystem;
  if (o.data_parallel.empty()) throw std::invalid_argument("--dp: no data-parallel sizes given");
  if (o.steps < 1) throw std::invalid_argument(fmt::format("--steps {}: must be at least 1", o.steps));
  if (o.warmup < 0) throw std::invalid_argument(fmt::format("--warmup {}: must not be negative", o.warmup));
  const Config& base = config;
  const auto& b = base.batch();
  // Every size is checked before anything runs.
  std::vector<Config> runs;
  for (int dp : o.data_parallel) {
    if (b.global_batch_size() % (b.micro_batch_size() * dp) != 0)
      throw std::invalid_argument(fmt::format(
          "--dp {}: batch.global_batch_size {} is not divisible by micro_batch_size {} x DP {}: every size must run the "
          "same global batch",
          dp, b.global_batch_size(), b.micro_batch_size(), dp));
    Config c = base;
    c.mutable_parallel()->set_data(dp);
    config::validate(c, config::Origins(fmt::format("the scaling run at DP {}", dp)));
    runs.push_back(for_run(c, (fs::path(o.out_dir) / "runs").string(), fmt::format("dp{}", dp), o.warmup + o.steps));
  }
  fs::create_directories(o.out_dir);

  ScalingReport rep;
  std::string head = fmt::format(
      "Scaling sweep of {}: DP {} with PP {} x TP {}, the same global batch of {} sequences x {} tokens\n"
      "window: updates {}-{} after {} warm-up updates; tokens/s = non-padding input tokens / summed step time of the "
      "window; step time runs from the first microbatch to updated weights, so checkpoints (none are taken) and "
      "evaluation (off) are excluded; TensorBoard off\n"
      "device: {} compute threads in all (device.threads = {}; 0 means this machine's cores) shared by every stage rank\n",
      o.config_source.empty() ? "the embedded default config" : o.config_source,
      join(o.data_parallel), base.parallel().pipeline(), base.parallel().tensor(), b.global_batch_size(),
      b.seq_length(), o.warmup + 1, o.warmup + o.steps, o.warmup,
      base.device().threads() > 0 ? base.device().threads() : int(std::max(1u, std::thread::hardware_concurrency())),
      base.device().threads());
  if (o.console) std::fprintf(o.console, "%s\n", head.c_str());

  for (const auto& c : runs) {
    actors::RunOptions ro;
    ro.console = false;
    ro.timeout = std::chrono::hours(24);
    const auto r = actors::run_training(c, ro);
    if (r.outcome.status != "completed")
      throw std::runtime_error(fmt::format("the run at DP {} {}: {}", c.parallel().data(), r.outcome.status,
                                           r.outcome.error));
    ScalingRow row;
    row.data_parallel = c.parallel().data();
    row.ranks = int64_t(c.parallel().data()) * c.parallel().pipeline() * c.parallel().tensor();
    row.microbatches = config::microbatches_per_replica(c);
    row.window = window_throughput(r.outcome.steps, o.warmup);
    if (row.window->tokens_per_s > 0) row.tokens_per_s = row.window->tokens_per_s;
    if (o.console) {
      std::fprintf(o.console, "  DP %lld: %s over %lld updates (median step %.3f s)\n",
                   static_cast<long long>(row.data_parallel), metrics::format_rate(row.window->tokens_per_s).c_str(),
                   static_cast<long long>(row.window->updates), row.window->median_step_s);
      std::fflush(o.console);
    }
    rep.rows.push_back(std::move(row));
  }
  compute_steps(rep.rows);
  const std::string table = format_scaling_table(rep.rows, "ranks");
  rep.text = head + "\n" + table;
  if (o.console) std::fprintf(o.console, "\n%s", table.c_str());

  auto& j = rep.json;
  j["config"] = o.config_source;
  j["pipeline_parallel"] = base.parallel().pipeline();
  j["tensor_parallel"] = base.parallel().tensor();
  j["global_batch_size"] = b.global_batch_size();
  j["seq_length"] = b.seq_length();
  j["warmup_updates"] = o.warmup;
  j["window_updates"] = o.steps;
  j["checkpoints_in_window"] = false;
  j["rows"] = metrics::Json::array();
  std::string txt = "# supervisor scaling: stage ranks (DP x PP x TP) and measured tokens/s;\n"
                    "# `supervisor plan --scaling FILE` reads this file\n";
  for (const auto& r : rep.rows) {
    metrics::Json row;
    row["ranks"] = r.ranks;
    row["data_parallel"] = r.data_parallel;
    row["microbatches_per_replica"] = r.microbatches;
    row["tokens_per_s"] = optional_number(r.tokens_per_s);
    row["speedup"] = optional_number(r.step ? std::optional(r.step->speedup) : std::nullopt);
    row["scaling_efficiency"] = optional_number(r.step ? std::optional(r.step->efficiency) : std::nullopt);
    if (r.window) {
      row["window_first_update"] = r.window->first_step;
      row["window_last_update"] = r.window->last_step;
      row["non_padding_tokens"] = r.window->real_tokens;
      row["step_seconds"] = metrics::json_number(r.window->step_seconds);
      row["median_step_s"] = metrics::json_number(r.window->median_step_s);
    }
    j["rows"].push_back(std::move(row));
    txt += r.tokens_per_s ? fmt::format("{} {:.1f}\n", r.ranks, *r.tokens_per_s) : fmt::format("{}\n", r.ranks);
  }
  metrics::write_file_atomic((fs::path(o.out_dir) / "scaling.json").string(), j.dump(2) + "\n");
  metrics::write_file_atomic((fs::path(o.out_dir) / "scaling.md").string(),
                             "# Scaling sweep\n\n```\n" + rep.text + "```\n");
  metrics::write_file_atomic((fs::path(o.out_dir) / "scaling.txt").string(), txt);
  return rep;
}

}  // namespace troupe::acceptance
