// `supervisor compare RUN_DIR...`: the runs' metrics.jsonl side by side, aligned by
// consumed tokens (metrics/compare.h; docs/metrics.md, "Comparing runs").
#include <boost/program_options.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/supervisor/cli_args.h"
#include "metrics/compare.h"
#include "metrics/error.h"
#include "metrics/plot.h"
#include "metrics/run_history.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor compare RUN_DIR... [--tokens input|loss] [--rows N] [--plot FILE.png]\n\n"
    "Reads each run's metrics.jsonl (and spikes.jsonl) and prints, aligned by consumed\n"
    "tokens: one line per run (steps, tokens, last training and validation loss,\n"
    "throughput, train and wall time, spikes, skipped and clipped updates), the\n"
    "validation loss of every run at the token counts all of them span (~: interpolated\n"
    "between a run's passes), and the tokens and wall time each run took to reach each\n"
    "run's final validation loss. A run that restarted or resumed is read as its final\n"
    "timeline (the last line of each step).\n"
    "Exit status: 0 printed, 1 a run directory unreadable, 2 usage.\n\n"
    "options:\n"
    "  --tokens input|loss  align by input tokens (samples x seq_length, the default) or\n"
    "                       by loss-bearing tokens\n"
    "  --rows N             rows of the equal-tokens table at most (default 12)\n"
    "  --plot FILE.png      also draw the losses against tokens and against wall time\n"
    "                       (training loss: lines, validation: dots; runs numbered 1, 2, ...)\n"
    "  -h, --help           this text\n";

}  // namespace

int compare_main(int argc, char** argv) {
  std::vector<std::string> dirs;
  std::string tokens = "input";
  int rows = 12;
  std::string plot;
  CommandLine cmd("compare");
  cmd.options.add_options()
      ("run", po::value<std::vector<std::string>>(&dirs))
      ("tokens", po::value<std::string>(&tokens))
      ("rows", po::value<int>(&rows))
      ("plot", po::value<std::string>(&plot))
      ("help,h", "");
  cmd.positional.add("run", -1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (dirs.empty()) return cmd.usage_error("no RUN_DIR given (see supervisor compare --help)");
  if (tokens != "input" && tokens != "loss")
    return cmd.usage_error("--tokens must be input or loss, got '" + tokens + "' (see supervisor compare --help)");
  if (rows < 2) return cmd.usage_error("--rows must be at least 2, got " + std::to_string(rows));

  std::vector<metrics::RunHistory> runs;
  for (const auto& d : dirs) {
    try {
      runs.push_back(metrics::load_run_history(d));
    } catch (const metrics::MetricsError& e) {
      std::fprintf(stderr, "supervisor compare: %s\n", e.what());
      return 1;
    }
  }
  metrics::CompareOptions o;
  o.axis = tokens == "input" ? metrics::TokenAxis::Input : metrics::TokenAxis::LossBearing;
  o.max_rows = rows;
  std::fputs(metrics::format_comparison(metrics::compare_runs(runs, o)).c_str(), stdout);
  if (!plot.empty()) {
    try {
      metrics::write_png(plot, metrics::plot_runs(runs, o.axis));
    } catch (const metrics::MetricsError& e) {
      std::fprintf(stderr, "supervisor compare: %s\n", e.what());
      return 1;
    }
    std::printf("\nplot: %s (", plot.c_str());
    for (size_t i = 0; i < runs.size(); ++i)
      std::printf("%s%zu = %s, #%06x", i ? "; " : "", i + 1, runs[i].dir.c_str(), unsigned(metrics::run_color(i)));
    std::printf(")\n");
  }
  return 0;
}

}  // namespace troupe::cli
