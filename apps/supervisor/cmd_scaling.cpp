// `supervisor scaling`: the same global batch at several data-parallel sizes, steady
// tokens/s and the scaling table (acceptance/scaling.h).
#include <cstdio>
#include <string>

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "acceptance/scaling.h"
#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "metrics/run_dir.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor scaling [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE] --dp N,N,...\n"
    "                          [--steps N] [--warmup W] [--out DIR] [--quiet]\n\n"
    "Trains CONFIG at each data-parallel size with the same global batch (microbatches per\n"
    "replica shrink as DP grows), W warm-up updates then N measured ones, and prints the\n"
    "scaling table: steady tokens/s (non-padding input tokens / summed step time of the N\n"
    "updates; no checkpoints, no evaluation), speed-up and scaling efficiency of each size\n"
    "against the previous one. Writes DIR/scaling.md, scaling.json and scaling.txt (rows\n"
    "`ranks tokens_per_s`, which `supervisor plan --scaling` reads); default DIR is\n"
    "RUN_DIR/scaling. All ranks share this machine's cores (device.threads).\n\n"
    "options:\n";

const char* kOptions =
    "  --dp LIST                data-parallel sizes, ascending, comma-separated (e.g. 1,2,4)\n"
    "  --steps N                updates in the measurement window (default 4)\n"
    "  --warmup W               updates before the window (default 2)\n"
    "  --out DIR                reports and one run directory per size (default RUN_DIR/scaling)\n"
    "  --quiet                  print nothing; the reports are still written\n"
    "  -h, --help               this text\n";

}  // namespace

int scaling_main(int argc, char** argv) {
  ConfigArgs config_args;
  CommandLine cmd("scaling");
  add_config_options(cmd.options, cmd.positional, config_args);
  std::string dp, out;
  int steps = 4, warmup = 2;
  cmd.options.add_options()("dp", po::value<std::string>(&dp))("steps", po::value<int>(&steps))(
      "warmup", po::value<int>(&warmup))("out", po::value<std::string>(&out))("quiet", "")("help,h", "");
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kOptions)) return *status;
  if (dp.empty()) return cmd.usage_error("--dp is required (e.g. --dp 1,2,4)");
  const LoadedConfig loaded = load_config(config_args);
  acceptance::ScalingOptions o;
  o.data_parallel = acceptance::parse_dp_list(dp);
  o.steps = steps;
  o.warmup = warmup;
  o.out_dir = out.empty() ? (metrics::run_dir_layout(loaded.config.logging().run_dir()).root + "/scaling") : out;
  o.config_source = loaded.describe();
  o.console = cmd.has("quiet") ? nullptr : stdout;
  if (cmd.has("quiet")) spdlog::set_level(spdlog::level::off);  // the runtime's own log lines too
  acceptance::run_scaling(loaded.config, o);
  return 0;
}

}  // namespace troupe::cli
