// `supervisor acceptance`: the acceptance ladder (docs/acceptance.md) on a small model
// derived from CONFIG's layout (acceptance/ladder.h).
#include <cstdio>
#include <string>

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "acceptance/ladder.h"
#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "metrics/run_dir.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor acceptance [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE] [--out DIR]\n"
    "                             [--max-ranks N] [--quiet]\n\n"
    "Runs the acceptance ladder on a small model derived from CONFIG: the same parallel layout\n"
    "(DP, PP, TP, schedule, distributed optimizer), 2 layers per stage, head size 16, 32-token\n"
    "windows of a built-in acceptance dataset. Rungs: 1 small-model correctness (boundary masks,\n"
    "loss normalization, DP / PP / TP / combined parity with the single-device reference),\n"
    "2 capacity (memory per stage rank against the ledger), 3 save / recover (kill a stage,\n"
    "recover; stop and resume), 4 calendar (days to the token budget from measured throughput).\n"
    "Each section prints PASS or FAIL with its numbers; tolerances are fixed in the code and\n"
    "listed in the report. Writes DIR/report.md and DIR/report.json (default: the run\n"
    "directory's acceptance/ folder). Exit status 0 when every rung passed, 1 on any FAIL.\n\n"
    "options:\n";

const char* kOptions =
    "  --out DIR                report, acceptance dataset and run directories (default RUN_DIR/acceptance)\n"
    "  --max-ranks N            refuse layouts with more than N stage ranks (default 64): every rank\n"
    "                           runs as threads of this process\n"
    "  --quiet                  print nothing; the report is still written\n"
    "  -h, --help               this text\n";

}  // namespace

int acceptance_main(int argc, char** argv) {
  ConfigArgs config_args;
  CommandLine cmd("acceptance");
  add_config_options(cmd.options, cmd.positional, config_args);
  std::string out;
  int max_ranks = 64;
  cmd.options.add_options()("out", po::value<std::string>(&out))("max-ranks", po::value<int>(&max_ranks))("quiet", "")(
      "break-loss-normalization", "")("help,h", "");
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kOptions)) return *status;
  if (max_ranks < 1) return cmd.usage_error("--max-ranks " + std::to_string(max_ranks) + ": must be at least 1");
  const LoadedConfig loaded = load_config(config_args);
  acceptance::AcceptanceOptions o;
  o.out_dir = out.empty() ? metrics::run_dir_layout(loaded.config.logging().run_dir()).acceptance : out;
  o.config_source = loaded.describe();
  o.max_ranks = max_ranks;
  // Test-only (not in --help): the loss-normalization section averages microbatch means.
  o.break_loss_normalization = cmd.has("break-loss-normalization");
  o.console = cmd.has("quiet") ? nullptr : stdout;
  if (cmd.has("quiet")) spdlog::set_level(spdlog::level::off);  // the runtime's own log lines too
  return acceptance::exit_status(acceptance::run_acceptance(loaded.config, o));
}

}  // namespace troupe::cli
