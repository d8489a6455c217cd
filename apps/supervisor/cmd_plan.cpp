// `supervisor plan`: a config's run arithmetic as tables (docs/planner.md).
#include <charconv>
#include <cmath>
#include <optional>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "config/derived.h"
#include "config/error.h"
#include "config/validate.h"
#include "data/blend.h"
#include "sched/planner.h"
#include "sched/activation_memory.h"
#include "sched/planner_report.h"
#include "sched/schedule_verifier.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor plan [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE]\n"
    "                       [--gpus N] [--throughput TOKENS_PER_S] [--calendar-efficiency F]\n"
    "                       [--scaling FILE] [--token-budget T] [--gpu-memory SIZE]\n"
    "                       [--failure-rate R | --mtbf-hours H --save-seconds C --recovery-seconds S\n"
    "                        [--recovery RESTART|ELASTIC]]\n"
    "       supervisor plan [CONFIG] ... --blend-order N\n\n"
    "Prints the plan of a config: tokens per update, microbatches per data-parallel group,\n"
    "ideal pipeline idle, causal position pairs, updates and shortfall against the token\n"
    "budget, warmup, the LR at its turning points, the main-state memory ledger per GPU\n"
    "and, given a throughput, the calendar, and a data blend's shares. docs/planner.md explains\n"
    "every line. With --blend-order N: only the dataset of each of the first N positions of\n"
    "the train blend's order, one a line (what tools/data_blend_megatron_check.py compares\n"
    "with megatron-core).\n\n"
    "options:\n";

const char* kPlanOptions =
    "  --gpus N                 plan for N GPUs: data parallel = N / (TP x PP x CP)\n"
    "  --throughput T           measured tokens/s of the whole cluster: adds the calendar\n"
    "  --calendar-efficiency F  share of wall time spent training, in (0, 1] (default 0.9);\n"
    "                           use 1 when T was measured over whole wall time\n"
    "  --scaling FILE           rows \"GPUs [tokens_per_s]\": speed-up and scaling\n"
    "                           efficiency per step, and a ledger row per cluster size\n"
    "  --token-budget T         tokens to plan against (default training.token_budget, or\n"
    "                           train tokens rounded up to 2 significant figures)\n"
    "  --gpu-memory SIZE        memory of one GPU (141GB, 80GiB, bytes): per stage, the least\n"
    "                           recomputation (none < selective < full of the fewest layers)\n"
    "                           that fits, or that none does\n"
    "  --failure-rate R         failures per GPU-hour (with --throughput): the calendar with\n"
    "                           failures, the checkpoint interval that keeps the most\n"
    "  --mtbf-hours H           the cluster's mean time between failures, instead of a rate\n"
    "  --save-seconds C         seconds one checkpoint save stalls training (measured)\n"
    "  --recovery-seconds S     seconds from a failure to training again: detection,\n"
    "                           restart and reload (measured)\n"
    "  --recovery MODE          RESTART (default: from the newest checkpoint) or ELASTIC\n"
    "                           (survivors adopt the lost replicas; not built yet: a what-if)\n"
    "  --blend-order N          print the train blend's first N dataset choices and stop\n"
    "  -h, --help               this text\n";

// A finite number from the whole of an option value ("1.6e6", "1600000"), or NaN.
double finite_number(const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) ? v : std::nan("");
}

// A positive number from an option value.
double positive_number(const std::string& option, const std::string& text) {
  const double v = finite_number(text);
  if (!(v > 0)) throw std::invalid_argument("--" + option + " " + text + ": expected a positive number");
  return v;
}

// A number of seconds >= 0 from an option value.
double non_negative_number(const std::string& option, const std::string& text) {
  const double v = finite_number(text);
  if (!(v >= 0)) throw std::invalid_argument("--" + option + " " + text + ": expected a number of seconds, 0 or more");
  return v;
}

// A positive whole number, also written in float notation ("1e13").
int64_t positive_count(const std::string& option, const std::string& text) {
  const double v = positive_number(option, text);
  if (v != std::floor(v) || v > 9.0e18)
    throw std::invalid_argument("--" + option + " " + text + ": expected a whole number");
  return int64_t(v);
}

}  // namespace

int plan_main(int argc, char** argv) {
  ConfigArgs config_args;
  std::string gpus, throughput, efficiency, scaling, budget, gpu_memory;
  std::string failure_rate, mtbf_hours, save_seconds, recovery_seconds, recovery, blend_order;
  CommandLine cmd("plan");
  add_config_options(cmd.options, cmd.positional, config_args);
  cmd.options.add_options()
      ("gpus", po::value<std::string>(&gpus))
      ("throughput", po::value<std::string>(&throughput))
      ("calendar-efficiency", po::value<std::string>(&efficiency))
      ("scaling", po::value<std::string>(&scaling))
      ("token-budget", po::value<std::string>(&budget))
      ("gpu-memory", po::value<std::string>(&gpu_memory))
      ("failure-rate", po::value<std::string>(&failure_rate))
      ("mtbf-hours", po::value<std::string>(&mtbf_hours))
      ("save-seconds", po::value<std::string>(&save_seconds))
      ("recovery-seconds", po::value<std::string>(&recovery_seconds))
      ("recovery", po::value<std::string>(&recovery))
      ("blend-order", po::value<std::string>(&blend_order))
      ("help,h", "");
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kPlanOptions))
    return *status;

  LoadedConfig loaded = load_config(config_args);
  const auto& data = loaded.config.data();
  auto entries = [](const auto& blend) {
    std::vector<data::BlendEntry> out;
    for (const auto& e : blend) out.push_back({e.prefix(), e.weight()});
    return out;
  };
  if (!blend_order.empty()) {
    const int64_t n = positive_count("blend-order", blend_order);
    if (data.blend().empty()) return cmd.usage_error("--blend-order: the config has no data.blend");
    std::vector<double> weights;
    for (const auto& e : data.blend()) weights.push_back(e.weight());
    const data::BlendOrder order(weights);
    std::string out;
    for (int64_t i = 0; i < n; ++i) {
      out += std::to_string(order.dataset_at(i));
      out += '\n';
      if (out.size() > (1 << 20)) std::fputs(out.c_str(), stdout), out.clear();
    }
    std::fputs(out.c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  sched::PlanInputs in;
  if (!gpus.empty()) {
    const int64_t n = positive_count("gpus", gpus);
    const auto& p = loaded.config.parallel();
    const int64_t per_replica = int64_t(p.tensor()) * p.pipeline() * p.context();
    if (n % per_replica != 0 || n / per_replica > INT32_MAX)
      throw std::invalid_argument("--gpus " + gpus + ": not a multiple of TP x PP x CP = " +
                                  std::to_string(per_replica));
    loaded.config.mutable_parallel()->set_data(int32_t(n / per_replica));
    loaded.origins.set("parallel.data", "--gpus " + gpus);
    config::validate(loaded.config, loaded.origins);
  }
  if (!throughput.empty()) in.tokens_per_s = positive_number("throughput", throughput);
  if (!efficiency.empty()) {
    in.calendar_efficiency = positive_number("calendar-efficiency", efficiency);
    if (in.calendar_efficiency > 1.0)
      throw std::invalid_argument("--calendar-efficiency " + efficiency + ": must be in (0, 1]");
  }
  if (!budget.empty()) in.token_budget = positive_count("token-budget", budget);
  if (!failure_rate.empty() || !mtbf_hours.empty()) {
    if (!failure_rate.empty() && !mtbf_hours.empty())
      return cmd.usage_error("--failure-rate and --mtbf-hours say the same thing: give one");
    if (throughput.empty())
      return cmd.usage_error("the calendar with failures needs --throughput (a step's time comes from it)");
    if (save_seconds.empty() || recovery_seconds.empty())
      return cmd.usage_error("the calendar with failures needs --save-seconds (what one checkpoint save stalls "
                             "training) and --recovery-seconds (failure to training again), both measured");
    if (!failure_rate.empty()) in.failures_per_gpu_hour = positive_number("failure-rate", failure_rate);
    if (!mtbf_hours.empty()) in.mtbf_hours = positive_number("mtbf-hours", mtbf_hours);
    in.save_stall_s = non_negative_number("save-seconds", save_seconds);
    in.recovery_s = non_negative_number("recovery-seconds", recovery_seconds);
    if (recovery == "ELASTIC" || recovery == "elastic")
      in.recovery = sched::Recovery::Elastic;
    else if (!recovery.empty() && recovery != "RESTART" && recovery != "restart")
      return cmd.usage_error("--recovery " + recovery + ": RESTART or ELASTIC");
  } else if (!save_seconds.empty() || !recovery_seconds.empty() || !recovery.empty()) {
    return cmd.usage_error("--save-seconds, --recovery-seconds and --recovery belong to --failure-rate or "
                           "--mtbf-hours");
  }
  if (!scaling.empty()) in.scaling = sched::read_scaling_file(scaling);
  std::optional<double> gpu_bytes;
  if (!gpu_memory.empty()) {
    try {
      gpu_bytes = sched::parse_memory_size(gpu_memory);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--gpu-memory: ") + e.what());
    }
  }

  std::printf("Plan for %s%s\n\n%s", loaded.describe().c_str(),
              gpus.empty() ? "" : (" on " + gpus + " GPUs").c_str(),
              sched::render_plan(loaded.config, in).c_str());
  // The op lists a run would execute, checked as `supervisor run` checks them before
  // starting (docs/runtime.md "The schedule verifier").
  const auto& par = loaded.config.parallel();
  const auto schedule = sched::build_pipeline_schedule(loaded.config);
  std::printf("\n%s\n", sched::schedule_verdict_line(schedule, par.schedule()).c_str());
  if (gpu_bytes) std::printf("\n%s", sched::render_memory_fit(loaded.config, *gpu_bytes).c_str());
  // A blend's shares of the run (docs/data.md, "Blends").
  const int64_t train = config::full_updates(loaded.config) * loaded.config.batch().global_batch_size();
  if (!data.blend().empty()) std::printf("\n%s", data::describe_blend("data.blend", entries(data.blend()), train).c_str());
  const int64_t eval = loaded.config.training().eval_samples();
  if (!data.valid_blend().empty() && eval > 0)
    std::printf("\n%s", data::describe_blend("data.valid_blend", entries(data.valid_blend()), eval).c_str());
  return 0;
}

}  // namespace troupe::cli
